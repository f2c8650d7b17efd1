"""Motion regions: the parts of a big frame the detector looks at, around what moved and what it is tracking.

As Frigate does (`frigate/video.py` `process_frames`, `frigate/util/object.py` `get_cluster_candidates` and
`get_cluster_region`): each changed blob and each object found on the last run is a candidate; nearby candidates
share one square region at the model's trained scale (a tile's size, models/tiles.py), so one inference holds
several people walking together; a candidate too big for that is given a region around it, shrunk to the model.
An object that stops is no longer motion but still a tracked box, so it keeps its region; the whole frame runs as
tiles at the start and every `full_frame_s`, for what stopped before it was ever seen. A frame where nothing moved
and nothing is tracked never reaches the detector (the motion gate, edge/stream/motion.py, stops it), so a still
scene costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from edge_inference.models.detection import Detection
from edge_inference.models.tiles import MAX_TILES, TRAINED_SIDE, Region

Box = tuple[float, float, float, float]
MARGIN = 0.25  # a candidate's region reaches this share of its size past it on every side, at least
TRACKED_GROWTH = 0.5  # a tracked box grows this much each way: where the object may have walked since


class MotionRegions:
    """One stream's planner: frame by frame, the regions to run, or None for the whole frame as tiles."""

    def __init__(self, full_frame_s: float) -> None:
        self.full_frame_s = full_frame_s  # the whole frame, as tiles, at least this often
        self._last_full: float | None = None

    def plan(
        self,
        frame_size: tuple[int, int],
        moved: Sequence[Box],
        tracked: Sequence[Box],
        now: float,
        input_size: tuple[int, int],
    ) -> tuple[Region, ...] | None:
        """The regions for this frame (`now`: the stream's clock, seconds; `input_size`: the model's); None: the
        whole frame, as tiles."""
        width, height = frame_size
        side = region_side(input_size)
        if width <= side and height <= side:
            return (Region(0, 0, width, height, whole=True),)  # a frame no bigger than a region: run it whole
        due = self._last_full is None or not 0 <= now - self._last_full < self.full_frame_s
        # what moved; what was found, where the gate looks again without motion (an object that stopped): a
        # moving object is in what moved, and an object not looked at keeps its last box (`unseen_since`)
        candidates = [*moved] if moved else [_grown(box, TRACKED_GROWTH) for box in tracked]
        if due or not candidates:
            self._last_full = now
            return None
        regions = cluster_regions(candidates, frame_size, side)
        if len(regions) > MAX_TILES:
            self._last_full = now
            return None  # motion everywhere (rain, a camera moved): the tiles cost less than more regions
        return regions


def region_side(input_size: tuple[int, int]) -> int:
    """A region's least side: the model sees it at its trained scale, as an `auto` tile."""
    return round(max(input_size) * max(1.0, TRAINED_SIDE / max(input_size)))


def cluster_regions(candidates: Sequence[Box], frame_size: tuple[int, int], side: int) -> tuple[Region, ...]:
    """Square regions of at least `side` pixels, inside the frame, that hold every candidate whole: the biggest
    candidate first, each region taking every other candidate that fits in it with its margin."""
    width, height = frame_size
    left = sorted(candidates, key=lambda b: (b[2] - b[0]) * (b[3] - b[1]), reverse=True)
    regions: list[Region] = []
    while left:
        cluster = _with_margin(left[0])
        size = max(side, cluster[2] - cluster[0], cluster[3] - cluster[1])
        apart = []
        for box in left[1:]:  # Frigate's get_cluster_candidates: a box joins while the cluster still fits
            joined = _union(cluster, _with_margin(box))
            if joined[2] - joined[0] <= size and joined[3] - joined[1] <= size:
                cluster = joined
            else:
                apart.append(box)
        region = _square_around((cluster[0] + cluster[2]) / 2, (cluster[1] + cluster[3]) / 2, size, width, height)
        regions.append(region)
        left = [box for box in apart if not _holds(region, _with_margin(box), frame_size)]
    return tuple(regions)


def _with_margin(box: Box) -> Box:
    x1, y1, x2, y2 = box
    pad = MARGIN * max(x2 - x1, y2 - y1, 8.0)
    return x1 - pad, y1 - pad, x2 + pad, y2 + pad


def _union(a: Box, b: Box) -> Box:
    return min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])


def _grown(box: Box, share: float) -> Box:
    x1, y1, x2, y2 = box
    dx, dy = (x2 - x1) * share / 2, (y2 - y1) * share / 2
    return x1 - dx, y1 - dy, x2 + dx, y2 + dy


def _square_around(cx: float, cy: float, size: float, width: int, height: int) -> Region:
    """A square of `size` centred on (cx, cy), moved inside the frame (cut to it where the frame is smaller)."""
    w, h = min(round(size), width), min(round(size), height)
    x = min(max(0, round(cx - w / 2)), width - w)
    y = min(max(0, round(cy - h / 2)), height - h)
    return Region(x, y, w, h)


def _holds(region: Region, box: Box, frame_size: tuple[int, int]) -> bool:
    """The box, cut to the frame, lies inside the region."""
    x1, y1, x2, y2 = region.box
    bx1, by1 = max(0.0, box[0]), max(0.0, box[1])
    bx2, by2 = min(float(frame_size[0]), box[2]), min(float(frame_size[1]), box[3])
    return bx1 >= x1 and by1 >= y1 and bx2 <= x2 and by2 <= y2


def unseen_since(previous: Sequence[Detection], regions: Sequence[Region]) -> list[Detection]:
    """The last result's objects that no region of this frame held whole: nothing looked at them, and nothing moved
    there (motion would have brought a region), so they stand as they were; the tracker keeps their ids."""
    return [
        replace(d, track_id=None)
        for d in previous
        if not any(
            r.x <= d.box.x1 and r.y <= d.box.y1 and d.box.x2 <= r.x + r.width and d.box.y2 <= r.y + r.height
            for r in regions
        )
    ]
