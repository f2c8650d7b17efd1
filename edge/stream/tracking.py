"""Per-stream tracking, zones and lines.

- Tracker: ByteTrack, as Roboflow's `trackers` 2.1 computes it (`bytetrack.py`; the tests require the library's
  track ids on every frame). It keeps low-score boxes for association, so a person briefly half hidden keeps
  their id.
- Zones and lines as supervision 0.31 counts them (`PolygonZone`, `LineCounter` below, also checked against it),
  both on the box's bottom centre: where the object stands. A line counts an object whose feet pass it within the line's
  extent (between the perpendiculars at its ends), so a line drawn across a path ignores people on another path
  behind it. Whole-box crossings (all four corners) missed people who crossed each other on the line, as the
  tracker briefly lost one.

Only `analyse` is called per frame; everything else is set up once per stream (and again when the frame size
changes, since 0..1 coordinates become pixels then).
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass, field

import cv2
import numpy as np

from edge_inference.edge.config import LineConfig, Point, TrackingConfig, ZoneConfig, are_fractions
from edge_inference.edge.stream.bytetrack import ByteTracker
from edge_inference.models.detection import Detection
from edge_inference.models.labels import LabelSet

log = logging.getLogger("edge.tracking")
# Drawn a little past an edge is deliberate (a zone down to the bottom of the picture); further, the points were
# taken from a frame of another size: the main stream's resolution on a sub-stream, or before FFmpeg scaled it.
BEYOND_FRAME = 0.1


@dataclass(frozen=True)
class ZoneState:
    name: str
    objects: dict[str, int]  # label -> objects in the zone now
    track_ids: frozenset[int]
    dwell_s: dict[int, float] = field(default_factory=dict)  # track id -> seconds in the zone so far
    polygon: tuple[tuple[int, int], ...] = ()  # in pixels, for drawing

    @property
    def longest_dwell_s(self) -> float:
        return max(self.dwell_s.values(), default=0.0)


@dataclass(frozen=True)
class LineState:
    name: str
    crossed_in: int  # totals since start
    crossed_out: int
    just_in: frozenset[int] = frozenset()  # track ids that crossed on this frame
    just_out: frozenset[int] = frozenset()
    ends: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (0, 0))  # in pixels, for drawing


@dataclass(frozen=True)
class Analysis:
    detections: list[Detection]  # every detection; tracked ones carry their track_id
    zones: tuple[ZoneState, ...] = ()
    lines: tuple[LineState, ...] = ()
    held: frozenset[int] = frozenset()  # track ids the tracker keeps, lost ones included: they may come back


def to_pixels(points: list[Point], width: int, height: int) -> np.ndarray:
    """Points in 0..1 of the frame (all of them) or already in pixels."""
    array = np.asarray(points, dtype=np.float64)
    if are_fractions(points):
        array = array * (width, height)
    return np.round(array).astype(np.int64)


def beyond_frame(kind: str, name: str, points: np.ndarray, width: int, height: int) -> str | None:
    """A zone or line in pixels that reaches well past the frame it is applied to: what to write instead."""
    margin_x, margin_y = BEYOND_FRAME * width, BEYOND_FRAME * height
    xs, ys = points[:, 0], points[:, 1]
    far = (xs < -margin_x) | (xs > width + margin_x) | (ys < -margin_y) | (ys > height + margin_y)
    if not far.any():
        return None
    x, y = points[int(np.argmax(far))].tolist()
    return (
        f"{kind} {name} has the point ({x}, {y}), beyond the {width}x{height} frame, so it "
        + ("never holds anyone" if kind == "zone" else "may never be crossed")
        + ": write its points in 0..1 of the frame (they then fit any resolution) or in pixels of this frame"
    )


class StreamTracker:
    def __init__(
        self,
        tracking: TrackingConfig | None,
        zones: list[ZoneConfig],
        lines: list[LineConfig],
        stream_id: str = "",
    ) -> None:
        self.config = tracking or TrackingConfig()
        self.labels = LabelSet(self.config.labels)
        self._tracker = ByteTracker(
            lost_after_s=self.config.lost_after_s,  # in seconds of the frames' own clock, whatever rate they come at
            track_activation_threshold=0.4,
            minimum_consecutive_frames=2,
            high_conf_det_threshold=0.5,
        )
        self._zone_configs, self._line_configs = zones, lines
        self.stream_id = stream_id
        self.placement_problem: str | None = None  # zones or lines that do not fit the frame, for /health/ready
        self._size: tuple[int, int] | None = None
        self._zones = ZoneMasks([])
        self._entered: dict[str, dict[int, float]] = {z.name: {} for z in zones}  # zone -> track id -> since
        self._lines = LineCounters([])
        self._outlines: dict[str, tuple[tuple[int, int], ...]] = {}
        self._ends: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {}

    def _place(self, width: int, height: int) -> None:
        self._size = (width, height)
        polygons = [to_pixels(zone.polygon, width, height) for zone in self._zone_configs]
        self._zones = ZoneMasks(polygons)
        self._outlines = {
            zone.name: tuple((int(x), int(y)) for x, y in polygon.tolist())
            for zone, polygon in zip(self._zone_configs, polygons, strict=True)
        }
        ends = [to_pixels([line.start, line.end], width, height).tolist() for line in self._line_configs]
        self._lines = LineCounters([((x1, y1), (x2, y2)) for (x1, y1), (x2, y2) in ends])
        self._ends = {
            line.name: ((int(x1), int(y1)), (int(x2), int(y2)))
            for line, ((x1, y1), (x2, y2)) in zip(self._line_configs, ends, strict=True)
        }
        self._check_placement(width, height)

    def _check_placement(self, width: int, height: int) -> None:
        """Said once per frame size in the log, and kept for /health/ready while it holds."""
        named = [("zone", name, outline) for name, outline in self._outlines.items()]
        named += [("line", name, ends) for name, ends in self._ends.items()]
        found = [beyond_frame(kind, name, np.asarray(points), width, height) for kind, name, points in named]
        problems = [problem for problem in found if problem]
        problem = f"stream {self.stream_id}: {'; '.join(problems)}" if problems else None
        if problem and problem != self.placement_problem:
            log.warning("%s", problem)
        self.placement_problem = problem

    def analyse(
        self, detections: list[Detection], width: int, height: int, now: float, still_until: float | None = None
    ) -> Analysis:
        """`now`: the frame's time in seconds on the stream's clock, for dwell times and how long a track is lost;
        `still_until`: the last frame before it that a motion gate skipped as still (`ByteTracker.update`)."""
        if self._size != (width, height):
            self._place(width, height)
        chosen = [i for i, d in enumerate(detections) if d.label in self.labels]
        boxes = np.array([[*_xyxy(detections[i])] for i in chosen], np.float32).reshape(-1, 4)
        scores = np.array([detections[i].score for i in chosen], np.float32)
        ids = self._tracker.update(boxes, scores, now, still_until)
        sure = ids >= 0  # ids only once a track is sure
        tracked = Tracked(boxes[sure], ids[sure], [chosen[i] for i in np.flatnonzero(sure).tolist()])
        result = list(detections)
        for index, track_id in zip(tracked.indices, tracked.ids.tolist(), strict=True):
            found = detections[index]  # built directly: dataclasses.replace costs more than the tracker per box
            result[index] = Detection(found.class_id, found.label, found.score, found.box, track_id)
        labels = [result[i].label for i in tracked.indices]
        zones, lines = self._zone_states(tracked, labels, now), self._line_states(tracked)
        return Analysis(result, zones, lines, self._tracker.held_ids)

    def _zone_states(self, tracked: Tracked, labels: list[str], now: float) -> tuple[ZoneState, ...]:
        if not self._zone_configs:
            return ()
        states = []
        for zone, inside in zip(self._zone_configs, self._zones.contains(tracked.feet).tolist(), strict=True):
            counts: dict[str, int] = {}
            ids = []
            for label, track_id, hit in zip(labels, tracked.id_list, inside, strict=True):
                if hit:
                    counts[label] = counts.get(label, 0) + 1
                    ids.append(track_id)
            entered = self._entered[zone.name]
            for gone in entered.keys() - ids:
                del entered[gone]
            dwell = {i: round(now - entered.setdefault(i, now), 3) for i in sorted(ids)}
            states.append(ZoneState(zone.name, counts, frozenset(ids), dwell, self._outlines[zone.name]))
        return tuple(states)

    def _line_states(self, tracked: Tracked) -> tuple[LineState, ...]:
        if not self._line_configs:
            return ()
        states = []
        crossings = self._lines.cross_at(tracked.feet, tracked.id_list)
        for line, counter, (crossed_in, crossed_out) in zip(
            self._line_configs, self._lines.counters, crossings, strict=True
        ):
            just_in = frozenset(tracked.ids[crossed_in].tolist())
            just_out = frozenset(tracked.ids[crossed_out].tolist())
            ends = self._ends[line.name]
            states.append(LineState(line.name, counter.in_count, counter.out_count, just_in, just_out, ends))
        return tuple(states)


class Tracked:
    """The boxes with a sure track on this frame: their boxes, ids, indices into the frame's detections, and
    their feet (bottom centres: what zones and lines test; computed only when a zone or line asks)."""

    def __init__(self, boxes: np.ndarray, ids: np.ndarray, indices: list[int]) -> None:
        self.boxes, self.ids, self.indices = boxes, ids, indices
        self.id_list: list[int] = ids.tolist()

    @functools.cached_property
    def feet(self) -> np.ndarray:
        return feet(self.boxes)


def _xyxy(detection: Detection) -> tuple[float, float, float, float]:
    box = detection.box
    return box.x1, box.y1, box.x2, box.y2


# -- zones and lines, as supervision 0.31 counts them on the bottom centre (its PolygonZone and LineZone) --------
def feet(boxes: np.ndarray) -> np.ndarray:
    """(N, 2) bottom centres of (N, 4) x1 y1 x2 y2 boxes: where an object stands."""
    return np.array([(boxes[:, 0] + boxes[:, 2]) / 2, boxes[:, 3]]).transpose()


class ZoneMasks:
    """Which boxes stand inside each of some polygons (in pixels), read off filled masks as supervision's
    PolygonZone does: one mask per polygon, of the polygon's extent plus one pixel, a point outside it is outside.
    The masks are stacked (padded to the largest) so that a frame's points are rounded and looked up once for
    all zones."""

    def __init__(self, polygons: list[np.ndarray]) -> None:
        corners = [np.asarray(polygon).astype(int) for polygon in polygons]
        height = max((int(c[:, 1].max()) + 2 for c in corners), default=1)
        width = max((int(c[:, 0].max()) + 2 for c in corners), default=1)
        self.masks = np.zeros((len(corners), height, width), dtype=bool)  # once here, not per frame
        for mask, polygon in zip(self.masks, corners, strict=True):
            filled = np.zeros((int(polygon[:, 1].max()) + 2, int(polygon[:, 0].max()) + 2), dtype=np.uint8)
            cv2.fillPoly(filled, [polygon.astype(np.int32)], color=(1,))
            mask[: filled.shape[0], : filled.shape[1]] = filled.astype(bool)

    def inside(self, boxes: np.ndarray) -> np.ndarray:
        """(zones, boxes): whether each box's feet are in each zone."""
        return self.contains(feet(boxes))

    def contains(self, points: np.ndarray) -> np.ndarray:
        """(zones, points): whether each (N, 2) point, rounded to pixels, falls on each filled polygon."""
        x, y = np.rint(points).astype(np.intp).transpose()
        _, height, width = self.masks.shape
        valid = (x >= 0) & (y >= 0) & (x < width) & (y < height)  # beyond every mask: in no zone
        hits = np.zeros((len(self.masks), len(x)), dtype=bool)
        hits[:, valid] = self.masks[:, y[valid], x[valid]]
        return hits


class LineCounter:
    """Crossings of a line from start to end by tracked boxes' feet, within the line's extent (between the
    perpendiculars at its ends). `in` is from the right-hand side to the left, looking from start to end.

    supervision's `minimum_crossing_threshold=1`: a track's first side is its reference, and a crossing counts when
    the feet are seen on the other side; with a history of two observations, the one it keeps per track is the
    reference side itself. A track's state goes once it has been absent for `FORGET_AFTER` frames."""

    FORGET_AFTER = 2

    def __init__(self, start: tuple[int, int], end: tuple[int, int]) -> None:
        self.start, self.end = start, end
        (x1, y1), (x2, y2) = start, end
        length = math.sqrt((x2 - x1) ** 2 + (y2 - y1) ** 2)
        if length == 0:
            raise ValueError("a line needs two different points")
        px, py = -(y2 - y1) / length, (x2 - x1) / length
        # the three segments whose sides are tested: the two perpendiculars at the ends, then the line itself
        self.segments = (((x1, y1), (x1 + px, y1 + py)), ((x2, y2), (x2 - px, y2 - py)), (start, end))
        self.in_count = self.out_count = 0
        self._side: dict[int, bool] = {}  # track id -> the side it was last confirmed on
        self._absent: dict[int, int] = {}

    def count(self, sides: np.ndarray, track_ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(crossed in, crossed out) per point, from the points' (3, N) cross products with `segments`; points
        with a negative id are not counted."""
        crossed_in, crossed_out = np.zeros(len(track_ids), bool), np.zeros(len(track_ids), bool)
        self._forget({i for i in track_ids if i >= 0})
        if not track_ids:
            return crossed_in, crossed_out
        in_limits = ((sides[0] > 0) == (sides[1] > 0)).tolist()
        left = (sides[2] < 0).tolist()  # supervision's "left trigger": counted as in
        for i, key in enumerate(track_ids):
            if key < 0 or not in_limits[i]:
                continue
            side = left[i]
            if self._side.setdefault(key, side) == side:
                continue
            self._side[key] = side
            if side:
                self.in_count += 1
                crossed_in[i] = True
            else:
                self.out_count += 1
                crossed_out[i] = True
        return crossed_in, crossed_out

    def _forget(self, present: set[int]) -> None:
        for key in list(self._side):
            if key in present:
                self._absent.pop(key, None)
                continue
            absent = self._absent.get(key, 0) + 1
            if absent >= self.FORGET_AFTER:
                del self._side[key]
                self._absent.pop(key, None)
            else:
                self._absent[key] = absent


class LineCounters:
    """Some lines' counters, their sides tested for a frame's points in one computation."""

    def __init__(self, ends: list[tuple[tuple[int, int], tuple[int, int]]]) -> None:
        self.counters = [LineCounter(start, end) for start, end in ends]
        segments = np.array([c.segments for c in self.counters], dtype=np.float64).reshape(-1, 2, 2)
        self._origins = segments[:, 0][:, None, :]
        self._directions = (segments[:, 1] - segments[:, 0])[:, None, :]

    def trigger(self, boxes: np.ndarray, track_ids: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per line, (crossed in, crossed out) per box on this frame; boxes with a negative id are not counted."""
        return self.cross_at(feet(boxes), track_ids.tolist())

    def cross_at(self, points: np.ndarray, track_ids: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        """As `trigger`, for the boxes' (N, 2) feet."""
        diff = points[None, :, :] - self._origins  # the 2-D cross product of each segment with each point
        sides = self._directions[..., 0] * diff[..., 1] - self._directions[..., 1] * diff[..., 0]
        return [counter.count(sides[3 * n : 3 * n + 3], track_ids) for n, counter in enumerate(self.counters)]
