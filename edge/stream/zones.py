"""Zones and lines as supervision 0.31 counts them (`PolygonZone`, `LineZone`), on the box's bottom centre only.

supervision is the reference: `tests/test_bytetrack.py` gives both the same tracked boxes and requires the same
objects in each zone and the same crossings on every frame. Written here so that the events extra does not import
supervision (with SciPy and Matplotlib, about 70 MiB of memory) for two small geometric tests.
"""

from __future__ import annotations

import math
from collections import deque

import cv2
import numpy as np


def feet(boxes: np.ndarray) -> np.ndarray:
    """(N, 2) bottom centres of (N, 4) x1 y1 x2 y2 boxes: where an object stands."""
    return np.array([(boxes[:, 0] + boxes[:, 2]) / 2, boxes[:, 3]]).transpose()


class PolygonZone:
    """Which boxes stand inside a polygon (in pixels), read off a filled mask as supervision does."""

    def __init__(self, polygon: np.ndarray) -> None:
        self.polygon = np.asarray(polygon).astype(int)
        x_max, y_max = np.max(self.polygon, axis=0)
        self.mask = np.zeros((int(y_max) + 2, int(x_max) + 2), dtype=np.uint8)
        cv2.fillPoly(self.mask, [self.polygon.astype(np.int32)], color=(1,))

    def inside(self, boxes: np.ndarray) -> np.ndarray:
        if not len(boxes):
            return np.zeros(0, dtype=bool)
        x, y = np.rint(feet(boxes)).astype(int).transpose()
        height, width = self.mask.shape
        in_bounds = (x >= 0) & (y >= 0) & (x < width) & (y < height)
        hits = in_bounds & self.mask[np.clip(y, 0, height - 1), np.clip(x, 0, width - 1)].astype(bool)
        return np.asarray(hits, dtype=bool)


class LineCounter:
    """Crossings of a line from start to end by tracked boxes' feet, within the line's extent (between the
    perpendiculars at its ends). A side counts once the feet are seen on it on two observations in a row
    (supervision's `minimum_crossing_threshold=1`); `in` is from the right-hand side to the left, looking from
    start to end."""

    HISTORY = 2

    def __init__(self, start: tuple[int, int], end: tuple[int, int]) -> None:
        self.start, self.end = start, end
        (x1, y1), (x2, y2) = start, end
        length = math.sqrt((x2 - x1) ** 2 + (y2 - y1) ** 2)
        if length == 0:
            raise ValueError("a line needs two different points")
        px, py = -(y2 - y1) / length, (x2 - x1) / length
        self.limits = (((x1, y1), (x1 + px, y1 + py)), ((x2, y2), (x2 - px, y2 - py)))
        self.in_count = self.out_count = 0
        self._history: dict[int, deque[bool]] = {}
        self._confirmed: dict[int, bool] = {}
        self._absent: dict[int, int] = {}

    def trigger(self, boxes: np.ndarray, track_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(crossed in, crossed out) per box on this frame; boxes with a negative id are not counted."""
        crossed_in, crossed_out = np.zeros(len(boxes), bool), np.zeros(len(boxes), bool)
        self._forget({int(i) for i in track_ids if i >= 0})
        if not len(boxes):
            return crossed_in, crossed_out
        points = feet(boxes)
        in_limits = ((cross(points, self.limits[0]) > 0) == (cross(points, self.limits[1]) > 0)).tolist()
        left = (cross(points, (self.start, self.end)) < 0).tolist()  # supervision's "left trigger": counted as in
        for i, key in enumerate(track_ids.tolist()):
            if key < 0 or not in_limits[i]:
                continue
            side = left[i]
            history = self._history.setdefault(key, deque(maxlen=self.HISTORY))
            history.append(side)
            confirmed = self._confirmed.setdefault(key, side)
            if len(history) < self.HISTORY or side == confirmed:
                continue
            if any(state != side for state in list(history)[1:]):
                continue
            self._confirmed[key] = side
            if side:
                self.in_count += 1
                crossed_in[i] = True
            else:
                self.out_count += 1
                crossed_out[i] = True
        return crossed_in, crossed_out

    def _forget(self, present: set[int]) -> None:
        """A track's crossing state goes once it has been absent for as many frames as the history holds."""
        for key in list(self._history):
            if key in present:
                self._absent.pop(key, None)
                continue
            absent = self._absent.get(key, 0) + 1
            if absent >= self.HISTORY:
                del self._history[key]
                self._confirmed.pop(key, None)
                self._absent.pop(key, None)
            else:
                self._absent[key] = absent


def cross(points: np.ndarray, segment: tuple[tuple[float, float], tuple[float, float]]) -> np.ndarray:
    """2-D cross product of the segment's direction with each point taken from its start; its sign is the side."""
    (x1, y1), (x2, y2) = segment
    direction = np.array([x2 - x1, y2 - y1])
    diff = points - np.array([x1, y1])
    return np.asarray(direction[0] * diff[..., 1] - direction[1] * diff[..., 0])
