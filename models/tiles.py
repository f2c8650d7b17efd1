"""A big frame cut into overlapping tiles the model sees at its own scale, and the tiles' boxes merged back.

Letterboxed whole, a 4K frame reaches a 416-pixel model at a ninth of its size, and a person 60 px tall becomes 7:
never found. Cut into tiles about the size of the photos the model was trained on, each person reaches it at the
size it learnt. As SAHI and supervision's `InferenceSlicer` do, the tiles overlap, so an object on a seam lies whole
in one of them; unlike a plain NMS over the tiles, a box cut by an inner tile edge is dropped where a neighbouring
tile holds the object whole, and an object too big for any tile's overlap, cut in each, is joined again. An extra
pass over the whole frame, letterboxed as usual, finds what is bigger than a tile.

Pure geometry over numpy arrays: the detector prepares each region and decodes it as it would a frame.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from edge_inference.models.decoders.nms import class_aware_nms
from edge_inference.models.errors import ModelError

# The long side of a COCO photo: the scale at which detectors trained on COCO (letterboxed into their input) learnt
# what a person looks like. `auto` tiles are this size (or the model's input, where larger).
TRAINED_SIDE = 640
DEFAULT_OVERLAP = 0.2
MAX_TILES = 64  # past this a frame costs more inferences than any engine here runs in a camera's frame period
MIN_TILE_SIDE = 32  # a smaller tile holds no object a detector can name
CUT_MARGIN_PX = 2.0  # a box this close to an inner tile edge was cut by it
HELD_WHOLE = 0.6  # a cut box is the part of a whole one when this share of it lies inside the whole one
SAME_SPAN = 0.5  # two cut parts are one object when their extents along the seam overlap this much (1-D IoU)


SMALLEST_SEEN_PX = 10  # about the least height a YOLO or SSD head finds a person at, in the model's input pixels
MISSED_WORTH_SAYING_PX = 40  # a camera whose people under this height are lost whole-frame is worth a word


def missed_below(frame_width: int, frame_height: int, input_width: int, input_height: int) -> float:
    """Objects shorter than this, in the frame's pixels, are too small for the model once the frame is letterboxed
    whole into its input."""
    scale = min(input_width / frame_width, input_height / frame_height)
    return SMALLEST_SEEN_PX / scale


class TilingError(ModelError):
    """Tiles asked for that cannot be cut (a bad grid, overlap or count): one line saying what to give."""


@dataclass(frozen=True)
class Tiling:
    """What was asked: a grid of COLSxROWS, or None for `auto`; the share of a tile its neighbour overlaps; whether
    the whole frame is also run (None: `auto` adds it wherever the frame is cut)."""

    grid: tuple[int, int] | None = None
    overlap: float = DEFAULT_OVERLAP
    full_frame: bool | None = None

    def __post_init__(self) -> None:
        if not 0 < self.overlap < 1 or not math.isfinite(self.overlap):
            raise TilingError(
                f"tile overlap {self.overlap} must be above 0 and below 1 (0.2 is usual): without an overlap an "
                "object on a seam is cut in two and found twice or not at all"
            )
        if self.overlap > 0.5:
            raise TilingError(f"tile overlap {self.overlap} above 0.5 runs most of the frame twice: give 0.1-0.5")
        if self.grid is not None:
            cols, rows = self.grid
            if cols < 1 or rows < 1:
                raise TilingError(f"--tiles {cols}x{rows}: give at least one column and one row, such as 3x2")
            if cols * rows > MAX_TILES:
                raise TilingError(
                    f"--tiles {cols}x{rows} is {cols * rows} inferences a frame, more than {MAX_TILES}: give fewer "
                    "tiles, or `auto` (tiles at the model's trained scale)"
                )


def parse_tiles(text: str, overlap: float = DEFAULT_OVERLAP, full_frame: bool | None = None) -> Tiling:
    """`auto` or `COLSxROWS` (`3x2`), as `--tiles` and a stream's `tiles:` take it."""
    spoken = text.strip().lower()
    if spoken == "auto":
        return Tiling(None, overlap, full_frame)
    match = re.fullmatch(r"(\d{1,3})\s*[x*\u00d7]\s*(\d{1,3})", spoken)
    if match is None:
        raise TilingError(f"tiles {text!r}: give auto, or columns x rows such as 3x2")
    return Tiling((int(match[1]), int(match[2])), overlap, full_frame)


@dataclass(frozen=True)
class Region:
    """A rectangle of the frame in its pixels, run through the model as a frame of its own."""

    x: int
    y: int
    width: int
    height: int
    whole: bool = False  # the full frame, letterboxed as the plain path does: its edges are the frame's

    def crop(self, image: np.ndarray) -> np.ndarray:
        return image[self.y : self.y + self.height, self.x : self.x + self.width]

    @property
    def box(self) -> tuple[int, int, int, int]:
        return self.x, self.y, self.x + self.width, self.y + self.height


@dataclass(frozen=True)
class Layout:
    """The regions one frame size is run as: tiles in rows, the full frame last where it is run too."""

    frame: tuple[int, int]
    grid: tuple[int, int]
    tile: tuple[int, int]
    regions: tuple[Region, ...]
    overlap: float

    @property
    def tiled(self) -> bool:
        return len(self.regions) > 1

    def describe(self) -> str:
        """What a user reads: how the frame was cut and what it costs."""
        if not self.tiled:
            return f"no tiles: the {self.frame[0]}x{self.frame[1]} frame fits one tile"
        cols, rows = self.grid
        whole = " and the full frame" if any(r.whole for r in self.regions) else ""
        runs = len(self.regions)  # two at least, where tiled
        return (
            f"{cols}x{rows} tiles of {self.tile[0]}x{self.tile[1]} px (overlap {self.overlap:g}){whole}: "
            f"{runs} inferences a frame"
        )


def tile_layout(frame_width: int, frame_height: int, input_width: int, input_height: int, tiling: Tiling) -> Layout:
    """The tiles for one frame size. `auto`: tiles the size of the photos the model was trained on (its input, or
    TRAINED_SIDE on the long side where the input is smaller), as few as cover the frame at the overlap asked; the
    full frame too. A frame no bigger than one tile is one region: the plain path, exactly."""
    if tiling.grid is None:
        scale = max(1.0, TRAINED_SIDE / max(input_width, input_height))
        tile_w, tile_h = round(input_width * scale), round(input_height * scale)
        cols, rows = _count(frame_width, tile_w, tiling.overlap), _count(frame_height, tile_h, tiling.overlap)
    else:
        cols, rows = tiling.grid
        tile_w, tile_h = _side(frame_width, cols, tiling.overlap), _side(frame_height, rows, tiling.overlap)
        if min(tile_w, tile_h) < MIN_TILE_SIDE:
            raise TilingError(
                f"--tiles {cols}x{rows} cuts this {frame_width}x{frame_height} frame into tiles of {tile_w}x{tile_h} "
                f"px, smaller than {MIN_TILE_SIDE}: give fewer tiles, or auto"
            )
    tile_w, tile_h = min(tile_w, frame_width), min(tile_h, frame_height)
    if cols * rows > MAX_TILES:
        raise TilingError(
            f"this {frame_width}x{frame_height} frame needs {cols}x{rows} tiles at the model's scale, more than "
            f"{MAX_TILES} inferences a frame: scale the frames down (the stream's width/height), or give a grid"
        )
    whole = Region(0, 0, frame_width, frame_height, whole=True)
    if cols * rows == 1:
        return Layout((frame_width, frame_height), (1, 1), (frame_width, frame_height), (whole,), tiling.overlap)
    tiles = tuple(
        Region(x, y, tile_w, tile_h)
        for y in _starts(frame_height, tile_h, rows)
        for x in _starts(frame_width, tile_w, cols)
    )
    full = tiling.full_frame if tiling.full_frame is not None else True
    regions = (*tiles, whole) if full else tiles
    return Layout((frame_width, frame_height), (cols, rows), (tile_w, tile_h), regions, tiling.overlap)


def _count(length: int, tile: int, overlap: float) -> int:
    """The fewest tiles of `tile` pixels that cover `length` with at least `overlap` of a tile shared."""
    if length <= tile:
        return 1
    return math.ceil((length - overlap * tile) / (tile * (1 - overlap)) - 1e-9)


def _side(length: int, count: int, overlap: float) -> int:
    """The tile side that covers `length` in `count` tiles overlapping by `overlap` of a tile."""
    return length if count == 1 else math.ceil(length / (count - (count - 1) * overlap))


def _starts(length: int, tile: int, count: int) -> list[int]:
    """Where each of `count` tiles starts, spread evenly from one edge to the other (so each overlap is at least
    the one asked)."""
    if count == 1:
        return [0]
    return [round(i * (length - tile) / (count - 1)) for i in range(count)]


@dataclass(frozen=True)
class RegionBoxes:
    """One region's detections, in the frame's pixels: boxes (N, 4) x1 y1 x2 y2, scores (N,), class ids (N,)."""

    region: Region
    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray


def merge_regions(
    parts: list[RegionBoxes], frame: tuple[int, int], iou: float, max_detections: int, *, partial: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The frame's boxes from its regions' (boxes, scores, class ids, and the index of the region each came from):
    a box cut by an inner tile edge is dropped where another region holds the object whole, parts of one object cut
    in two tiles are joined, then class-aware NMS keeps one box per object, best score first. `partial`: regions
    that leave parts of the frame out (motion regions): a cut box is dropped whatever else holds it, since the
    object it was cut from lies partly where nothing looked (its last box stands for it: models/regions.py)."""
    if not parts:
        empty = np.empty((0, 4), np.float32)
        return empty, np.empty(0, np.float32), np.empty(0, np.int64), np.empty(0, np.int64)
    boxes = np.concatenate([p.boxes for p in parts]).astype(np.float32).reshape(-1, 4)
    scores = np.concatenate([p.scores for p in parts]).astype(np.float32)
    class_ids = np.concatenate([p.class_ids for p in parts]).astype(np.int64)
    origin = np.concatenate([np.full(len(p.scores), i, np.int64) for i, p in enumerate(parts)])
    cut = np.concatenate([_cut_sides(p, frame) for p in parts]).reshape(-1, 4)
    regions = [p.region for p in parts]
    keep = _not_held_whole_elsewhere(boxes, class_ids, origin, cut) & _not_part_of_larger(
        boxes, class_ids, origin, regions
    )
    if partial:
        keep &= ~cut.any(axis=1)
    boxes, scores, class_ids, origin, cut = boxes[keep], scores[keep], class_ids[keep], origin[keep], cut[keep]
    boxes, scores, class_ids, origin = _join_cut_parts(boxes, scores, class_ids, origin, cut)
    kept = class_aware_nms(boxes, scores, class_ids, iou, max_detections)
    return boxes[kept], scores[kept], class_ids[kept], origin[kept]


def _cut_sides(part: RegionBoxes, frame: tuple[int, int]) -> np.ndarray:
    """Per box, which of its sides (left, top, right, bottom) an inner edge of its region cut: a region's edge that
    is not the frame's, with the box on it."""
    region, boxes = part.region, part.boxes.reshape(-1, 4)
    x1, y1, x2, y2 = region.box
    inner = np.array([x1 > 0, y1 > 0, x2 < frame[0], y2 < frame[1]]) & (not region.whole)
    edges = np.array([x1, y1, x2, y2], np.float32)
    touching = np.abs(boxes - edges) <= CUT_MARGIN_PX
    return touching & inner


def _not_held_whole_elsewhere(
    boxes: np.ndarray, class_ids: np.ndarray, origin: np.ndarray, cut: np.ndarray
) -> np.ndarray:
    """False for a cut box that lies mostly inside an uncut box of its class from another region."""
    keep = np.ones(len(boxes), bool)
    was_cut = cut.any(axis=1)
    whole = np.flatnonzero(~was_cut)
    for index in np.flatnonzero(was_cut):
        others = whole[(class_ids[whole] == class_ids[index]) & (origin[whole] != origin[index])]
        if others.size and _inside_share(boxes[index], boxes[others]).max() >= HELD_WHOLE:
            keep[index] = False
    return keep


def _not_part_of_larger(
    boxes: np.ndarray, class_ids: np.ndarray, origin: np.ndarray, regions: list[Region]
) -> np.ndarray:
    """False for a tile's box that lies mostly inside a box of its class from the full frame that its tile could not
    hold whole: a cat's head called a cat in one tile, where the full frame saw the whole cat."""
    keep = np.ones(len(boxes), bool)
    from_whole = np.flatnonzero([regions[o].whole for o in origin])
    if not from_whole.size:
        return keep
    for index in np.flatnonzero([not regions[o].whole for o in origin]):
        tile = np.array(regions[origin[index]].box, np.float32)
        larger = from_whole[class_ids[from_whole] == class_ids[index]]
        beyond = larger[_outside(boxes[larger], tile)]
        if beyond.size and _inside_share(boxes[index], boxes[beyond]).max() >= HELD_WHOLE:
            keep[index] = False
    return keep


def _outside(boxes: np.ndarray, tile: np.ndarray) -> np.ndarray:
    """Which boxes reach past the tile's rectangle by more than the cut margin on some side."""
    past = np.concatenate([tile[:2] - boxes[:, :2], boxes[:, 2:] - tile[2:]], axis=1)
    return np.asarray((past > CUT_MARGIN_PX).any(axis=1))


def _inside_share(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """The share of `box`'s area inside each of `others`."""
    width = np.clip(np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0]), 0, None)
    height = np.clip(np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1]), 0, None)
    area = max(float((box[2] - box[0]) * (box[3] - box[1])), 1e-6)
    return np.asarray(width * height / area)


def _join_cut_parts(
    boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, origin: np.ndarray, cut: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Parts of one object cut at facing edges of two tiles (a right side cut in one, the left side in the other,
    overlapping, spanning the same rows) joined into the box around both, with the better score."""
    boxes, scores = boxes.copy(), scores.copy()
    alive = np.ones(len(boxes), bool)
    candidates = [int(i) for i in np.flatnonzero(cut.any(axis=1))]
    for a in candidates:
        for b in candidates:
            if a == b or not (alive[a] and alive[b]) or origin[a] == origin[b] or class_ids[a] != class_ids[b]:
                continue
            if _facing_parts(boxes[a], cut[a], boxes[b], cut[b]):
                boxes[a] = [*np.minimum(boxes[a][:2], boxes[b][:2]), *np.maximum(boxes[a][2:], boxes[b][2:])]
                scores[a] = max(scores[a], scores[b])
                cut[a] = cut[a] & cut[b]  # the joined box is cut only where both parts were
                alive[b] = False
    return boxes[alive], scores[alive], class_ids[alive], origin[alive]


def _facing_parts(a: np.ndarray, cut_a: np.ndarray, b: np.ndarray, cut_b: np.ndarray) -> bool:
    """`a` cut on one side and `b` on the opposite one, overlapping across the seam, over the same span along it."""
    for side, axis in ((2, 0), (3, 1)):  # a's right (bottom) side against b's left (top) one
        opposite = side - 2
        if cut_a[side] and cut_b[opposite] and b[opposite] < a[side] and a[opposite] < b[side]:
            along = 1 - axis  # the extent along the seam: rows for a vertical seam
            low, high = max(a[along], b[along]), min(a[along + 2], b[along + 2])
            union = max(a[along + 2], b[along + 2]) - min(a[along], b[along])
            if union > 0 and (high - low) / union >= SAME_SPAN:
                return True
    return False
