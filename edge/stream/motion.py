"""Run the detector only when something moves, as Frigate does: what makes CPU-only and Pi deployments viable.

Per frame (about 0.2 ms): the frame shrunk to 160 pixels wide, grey, blurred, compared with a running-average
background. Pixels that changed by more than `pixel_threshold` grey levels, outside the ignored regions (a clock
burnt into the picture), are motion; the detector runs when they cover more than `threshold` of the frame. The
background follows slow changes (dusk, clouds) and absorbs whatever stops moving, so an object that parks is no
longer motion: while the last detection found objects, the detector still runs every `recheck_s`, and on a still,
empty scene every `max_idle_s` (so the latest result, and events waiting to end, stay current). Objects that are
found where they were at the last check (parked cars) are stationary: each such recheck doubles the interval to
the next, up to `stationary_max_s`; motion, or objects that moved, came or went, reset it to `recheck_s`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from edge_inference.edge.config import MotionConfig, RegionsConfig
from edge_inference.edge.stream.tracking import to_pixels
from edge_inference.models.regions import MotionRegions

WIDTH = 160
# For motion regions the boxes must hold people a few dozen pixels tall on a 4K camera: at 160 px wide they are a
# pixel or two, at 640 a walking person changes a few dozen pixels (about 1 ms a 4K frame)
REGIONS_WIDTH = 640
MIN_BOX_PIXELS = 6  # a changed blob smaller than this, at the working width, is noise
BACKGROUND_RATE = 0.05  # weight of a new frame in the running background: about 20 frames of memory
STILL_IOU = 0.9  # a box that overlaps its place at the last check this much has not moved
STILL_PX = 3.0  # nor has one whose every side is this close to where it was (a person 20 px wide, found again)
Box = tuple[float, float, float, float]  # x1, y1, x2, y2 in pixels


@dataclass(frozen=True)
class MotionVerdict:
    run: bool  # the detector runs on this frame
    moving: float  # fraction of the frame that changed
    reason: str  # motion, recheck, idle, first, still
    boxes: tuple[Box, ...] = ()  # where it changed, in the frame's pixels (a gate asked for boxes)


class MotionGate:
    def __init__(self, config: MotionConfig, boxes: bool = False) -> None:
        self.config = config
        self.boxes = boxes  # also say where it moved (motion regions), on a finer copy of the frame
        self._width = REGIONS_WIDTH if boxes else WIDTH
        self._background: np.ndarray | None = None
        self._mask: np.ndarray | None = None  # 1 where changes count
        self._size: tuple[int, int] | None = None
        self._last_run = float("-inf")
        self._objects: list[Box] = []  # what the last run found
        self._recheck_s = config.recheck_s  # grows while the objects stay put
        self._last_reason = "first"
        self._asked_at: float | None = None  # when a run started whose boxes have not come back (`found`) yet
        self._lock = threading.Lock()
        self.skipped = 0

    def check(self, image_bgr: np.ndarray, now: float) -> MotionVerdict:
        """Whether the detector should run on this frame (`now`: monotonic seconds)."""
        with self._lock:
            changed = self._changed(image_bgr)
            moving = None if changed is None else self._fraction(changed)
            boxes = self._boxes(changed, image_bgr.shape[1]) if self.boxes and changed is not None else ()
            verdict = self._decide(moving, now, boxes)
            if verdict.run:
                self._last_run = now
                self._last_reason = verdict.reason
                self._asked_at = now
            else:
                self.skipped += 1
            return verdict

    def found(self, boxes: Sequence[Box]) -> None:
        """The boxes the detector found on the frame it last ran on: while objects are there they are rechecked,
        less often while they stay where they were."""
        with self._lock:
            self._asked_at = None
            boxes = list(boxes)
            stationary = self._last_reason in ("recheck", "idle") and boxes and _same_places(boxes, self._objects)
            if stationary:
                self._recheck_s = min(self._recheck_s * 2, max(self.config.stationary_max_s, self.config.recheck_s))
            else:
                self._recheck_s = self.config.recheck_s
            self._objects = boxes

    @property
    def recheck_s(self) -> float:
        """The interval to the next recheck while nothing moves."""
        return self._recheck_s

    def _decide(self, moving: float | None, now: float, boxes: tuple[Box, ...] = ()) -> MotionVerdict:
        since = now - self._last_run
        if since < 0:  # a looping file started again
            since = float("inf")
        if moving is None:
            return MotionVerdict(True, 1.0, "first")
        # with boxes, one small thing moving counts: a person far off is a thousandth of a 4K frame
        if moving > self.config.threshold or boxes:
            return MotionVerdict(True, moving, "motion", boxes)
        # a recheck waits for the last run's answer (25 regions on a 4K frame take a second), unless it never came
        answering = self._asked_at is not None and 0 <= now - self._asked_at < self.config.max_idle_s
        if self._objects and since >= self._recheck_s and not answering:
            return MotionVerdict(True, moving, "recheck")
        if since >= self.config.max_idle_s:
            return MotionVerdict(True, moving, "idle")
        return MotionVerdict(False, moving, "still")

    def _changed(self, image_bgr: np.ndarray) -> np.ndarray | None:
        """Where the small copy changed, outside ignored parts; None for the first frame (or a new frame size)."""
        height, width = image_bgr.shape[:2]
        small_w = self._width
        small_h = max(1, round(height * small_w / width))
        # bilinear: 0.1 ms; INTER_AREA's exact averaging costs 1.6 ms at 768 -> 160, and the blur smooths anyway
        small = cv2.resize(image_bgr, (small_w, small_h), interpolation=cv2.INTER_LINEAR)
        grey = cv2.GaussianBlur(cv2.cvtColor(small, cv2.COLOR_BGR2GRAY), (5, 5), 0).astype(np.float32)
        if self._background is None or self._size != (width, height):
            self._background, self._size = grey, (width, height)
            self._mask = self._ignore_mask(width, height, small.shape[1], small.shape[0])
            return None
        changed = cv2.absdiff(grey, self._background) > self.config.pixel_threshold
        cv2.accumulateWeighted(grey, self._background, BACKGROUND_RATE)
        if self._mask is not None:
            changed &= self._mask
        return changed

    def _fraction(self, changed: np.ndarray) -> float:
        """The share of the frame (its counted part) that moved."""
        counted = changed.size if self._mask is None else max(1, int(np.count_nonzero(self._mask)))
        return float(np.count_nonzero(changed)) / counted

    def _boxes(self, changed: np.ndarray, width: int) -> tuple[Box, ...]:
        """The changed blobs' boxes in the frame's pixels; blobs a few pixels apart are one (a walking person's
        legs and head change apart)."""
        joined = cv2.dilate(changed.astype(np.uint8), np.ones((5, 5), np.uint8))
        count, labels, stats, _ = cv2.connectedComponentsWithStats(joined, connectivity=8)
        pixels = np.bincount(labels[changed], minlength=count)  # changed pixels in each blob, not its dilation
        scale = width / changed.shape[1]
        return tuple(
            (float(x * scale), float(y * scale), float((x + w) * scale), float((y + h) * scale))
            for (x, y, w, h, _), changed_pixels in zip(stats[1:count], pixels[1:count], strict=True)
            if changed_pixels >= MIN_BOX_PIXELS
        )

    def _ignore_mask(self, width: int, height: int, small_w: int, small_h: int) -> np.ndarray | None:
        if not self.config.ignore:
            return None
        mask = np.ones((small_h, small_w), dtype=np.uint8)
        for polygon in self.config.ignore:
            points = to_pixels(polygon, width, height).astype(np.float64) * (small_w / width, small_h / height)
            cv2.fillPoly(mask, [np.round(points).astype(np.int32)], 0)
        return mask.astype(bool)


def _iou(a: Box, b: Box) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return 0.0
    inter = width * height
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _same_places(boxes: list[Box], before: list[Box]) -> bool:
    """Nearly the same objects, each where one was: all of a few; of many, all but a tenth, since a box near the
    score threshold comes and goes (150 people and cars on a 4K street never held still all at once, and the scene
    was checked every second for ever)."""
    if not before:
        return False
    slack = len(boxes) // 10
    if abs(len(boxes) - len(before)) > slack:
        return False
    moved = sum(1 for box in boxes if not any(_in_place(box, old) for old in before))
    return moved <= slack


def _in_place(box: Box, old: Box) -> bool:
    return _iou(box, old) >= STILL_IOU or all(abs(a - b) <= STILL_PX for a, b in zip(box, old, strict=True))


def gate_and_regions(
    motion: MotionConfig | None, regions: RegionsConfig
) -> tuple[MotionGate | None, MotionRegions | None]:
    """A stream's motion gate (one that says where it moved, for motion regions: on with its defaults there) and
    its region planner."""
    if regions.mode == "motion":
        return MotionGate(motion or MotionConfig(), boxes=True), MotionRegions(regions.full_frame_s)
    return (MotionGate(motion) if motion else None), None
