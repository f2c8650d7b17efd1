"""ByteTrack as Roboflow's `trackers` 2.1 computes it (`ByteTrackTracker`), without `supervision` and SciPy.

The library is the reference: `tests/test_bytetrack.py` runs both on the same detections (a real video's and
synthetic crowds) and requires the same track id on every detection of every frame. What differs is the cost:
the library wraps each matched box in a deep-copied `sv.Detections` and merges them, and importing it loads
supervision, SciPy and Matplotlib (about 70 MiB). Here a frame is two arrays in and one array of ids out.

Kept exactly: the Kalman filter (float32, its matrices and its order of operations), the IoU (float64, cast to
float32), the two association steps (high scores, then low scores against the tracks left), the optimal
assignment that maximises total IoU with matches below `minimum_iou_threshold` dropped afterwards, when an id is
given (after `minimum_consecutive_frames` updates), and which tracks survive.

The assignment: SciPy's `linear_sum_assignment(maximize=True)` over the whole matrix. Its optimum's positive
entries are a maximum-weight matching of the positive IoUs (zeros add nothing), so each group of tracks and boxes
that overlap one another is solved on its own: almost always one track and one box.
"""

from __future__ import annotations

from typing import Any

import numpy as np

F = np.eye(8, dtype=np.float32)  # constant velocity: each corner moves by its velocity per frame
F[range(4), range(4, 8)] = 1.0
F_T = F.T
H = np.eye(4, 8, dtype=np.float32)  # the four corners are measured
H_T = H.T
Q = np.eye(8, dtype=np.float32) * 0.01
R = np.eye(4, dtype=np.float32) * 0.1
I8 = np.eye(8, dtype=np.float32)


class Covariances:
    """The filter's covariance after a predict or an update depends only on the covariance before it, and tracks
    that are seen on every frame go through the same few: each step is computed once, and the same arrays are
    shared (so the results are the library's to the bit). Cleared when it grows past `LIMIT` entries."""

    LIMIT = 4096

    def __init__(self) -> None:
        self.initial = np.eye(8, dtype=np.float32)
        self._predicted: dict[bytes, np.ndarray] = {}
        self._updated: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

    def predict(self, p: np.ndarray) -> np.ndarray:
        key = p.tobytes()
        found = self._predicted.get(key)
        if found is None:
            self._trim(self._predicted)
            found = self._predicted[key] = F @ p @ F_T + Q
        return found

    def update(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the Kalman gain, the covariance after the update)."""
        key = p.tobytes()
        found = self._updated.get(key)
        if found is None:
            self._trim(self._updated)
            gain = p @ H_T @ np.linalg.inv(H @ p @ H_T + R)
            found = self._updated[key] = (gain, (I8 - gain @ H) @ p)
        return found

    def _trim(self, table: dict[bytes, Any]) -> None:
        if len(table) >= self.LIMIT:
            table.clear()


class Track:
    """One object's Kalman filter over (x1, y1, x2, y2, vx1, vy1, vx2, vy2)."""

    __slots__ = ("P", "covariances", "state", "time_since_update", "track_id", "updates")

    def __init__(self, box: np.ndarray, covariances: Covariances) -> None:
        self.track_id = -1  # an id only once the track is sure
        self.updates = 1
        self.time_since_update = 0
        self.state: np.ndarray = np.zeros((8, 1), dtype=np.float32)
        self.state[:4, 0] = box
        self.covariances = covariances
        self.P = covariances.initial

    def predict(self) -> None:
        self.state = F @ self.state
        self.P = self.covariances.predict(self.P)
        self.time_since_update += 1

    def update(self, box: np.ndarray) -> None:
        self.time_since_update = 0
        self.updates += 1
        gain, self.P = self.covariances.update(self.P)
        self.state = self.state + gain @ (box.reshape((4, 1)) - H @ self.state)


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of `a` with every box of `b`, as supervision's `box_iou_batch` rounds it."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    width = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    height = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    inter = np.clip(width, 0.0, None) * np.clip(height, 0.0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    out = np.zeros(inter.shape, dtype=np.float32)
    np.divide(inter, union, out=out, where=union > 0)
    return out


def best_assignment(weights: np.ndarray) -> list[tuple[int, int]]:
    """(row, column) pairs of a matching with the largest total weight, sorted by row; zero entries never pair."""
    linked = weights > 0
    row_links, col_links = linked.sum(axis=1), linked.sum(axis=0)
    alone = linked & (row_links[:, None] == 1) & (col_links[None, :] == 1)  # one track on one box: most of them
    pairs = list(zip(*(axis.tolist() for axis in np.nonzero(alone)), strict=True))
    linked[alone.any(axis=1)] = False
    for rows, cols in overlapping_groups(linked):
        if len(rows) == 1 or len(cols) == 1:
            block = weights[np.ix_(rows, cols)]
            r, c = np.unravel_index(int(np.argmax(block)), block.shape)
            pairs.append((rows[r], cols[c]))
        else:
            block = weights[np.ix_(rows, cols)].astype(np.float64)
            pairs += [(rows[r], cols[c]) for r, c in hungarian_max(block) if block[r, c] > 0]
    return sorted(pairs)


def overlapping_groups(linked: np.ndarray) -> list[tuple[list[int], list[int]]]:
    """The connected groups of rows and columns of a boolean matrix, each with at least one link."""
    rows_of, cols_of = np.nonzero(linked)
    parent = list(range(linked.shape[0]))  # union-find over rows; a column joins the rows it links

    def root(row: int) -> int:
        while parent[row] != row:
            parent[row] = parent[parent[row]]
            row = parent[row]
        return row

    first_row: dict[int, int] = {}
    for row, col in zip(rows_of.tolist(), cols_of.tolist(), strict=True):
        other = first_row.setdefault(col, row)
        parent[root(row)] = root(other)
    groups: dict[int, tuple[set[int], set[int]]] = {}
    for row, col in zip(rows_of.tolist(), cols_of.tolist(), strict=True):
        rows, cols = groups.setdefault(root(row), (set(), set()))
        rows.add(row)
        cols.add(col)
    return [(sorted(rows), sorted(cols)) for rows, cols in groups.values()]


def hungarian_max(weights: np.ndarray) -> list[tuple[int, int]]:
    """An assignment of largest total weight (the Hungarian method with potentials, O(n^2 m)); rows <= columns
    or the transpose is solved."""
    if weights.shape[0] > weights.shape[1]:
        return [(r, c) for c, r in hungarian_max(weights.T)]
    n, m = weights.shape
    cost = -weights
    u, v = np.zeros(n + 1), np.zeros(m + 1)
    owner = [0] * (m + 1)  # column -> row (1-based; 0 = free)
    for row in range(1, n + 1):
        owner[0], col0 = row, 0
        slack, way, used = np.full(m + 1, np.inf), [0] * (m + 1), [False] * (m + 1)
        while owner[col0]:
            used[col0] = True
            r0, delta, col1 = owner[col0], np.inf, 0
            for col in range(1, m + 1):
                if not used[col]:
                    reduced = cost[r0 - 1, col - 1] - u[r0] - v[col]
                    if reduced < slack[col]:
                        slack[col], way[col] = reduced, col0
                    if slack[col] < delta:
                        delta, col1 = slack[col], col
            for col in range(m + 1):
                if used[col]:
                    u[owner[col]] += delta
                    v[col] -= delta
                else:
                    slack[col] -= delta
            col0 = col1
        while col0:
            col1 = way[col0]
            owner[col0] = owner[col1]
            col0 = col1
    return sorted((owner[col] - 1, col - 1) for col in range(1, m + 1) if owner[col])


class ByteTracker:
    """`update(boxes, scores)` -> a track id per box (-1: not tracked, or not yet sure)."""

    def __init__(
        self,
        lost_track_buffer: int = 30,
        frame_rate: float = 30.0,
        track_activation_threshold: float = 0.7,
        minimum_consecutive_frames: int = 2,
        minimum_iou_threshold: float = 0.1,
        high_conf_det_threshold: float = 0.6,
    ) -> None:
        self.maximum_frames_without_update = int(frame_rate / 30.0 * lost_track_buffer)
        self.minimum_consecutive_frames = minimum_consecutive_frames
        self.minimum_iou_threshold = minimum_iou_threshold
        self.track_activation_threshold = track_activation_threshold
        self.high_conf_det_threshold = high_conf_det_threshold
        self.tracks: list[Track] = []
        self._next_id = 0
        self._covariances = Covariances()

    def update(self, boxes: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """boxes: (N, 4) float32 x1 y1 x2 y2; scores: (N,)."""
        ids = np.full(len(boxes), -1, dtype=np.int64)
        if not self.tracks and not len(boxes):
            return ids
        for track in self.tracks:
            track.predict()
        high = np.flatnonzero(scores >= self.high_conf_det_threshold)
        low = np.flatnonzero(~(scores >= self.high_conf_det_threshold))
        left, unmatched_high = self._associate(self.tracks, boxes, high, ids)
        self._associate(left, boxes, low, ids)
        for index in unmatched_high:  # ascending, as the library's set of ints iterates
            if float(scores[index]) >= self.track_activation_threshold:
                self.tracks.append(Track(boxes[index], self._covariances))
        self.tracks = [
            t
            for t in self.tracks
            if t.time_since_update < self.maximum_frames_without_update
            and (t.updates >= self.minimum_consecutive_frames or t.time_since_update == 0)
        ]
        return ids

    def _associate(
        self, tracks: list[Track], boxes: np.ndarray, chosen: np.ndarray, ids: np.ndarray
    ) -> tuple[list[Track], list[int]]:
        """Match `tracks` to the boxes `chosen`, update the matched tracks and write their ids; returns the tracks
        and the chosen boxes (indices into `boxes`) left unmatched."""
        if not tracks or not len(chosen):
            return tracks, chosen.tolist()
        predicted = np.array([t.state[:4, 0] for t in tracks], dtype=np.float64)
        iou = iou_matrix(predicted, boxes[chosen])
        matched_tracks, matched_boxes = set(), set()
        for row, col in best_assignment(iou):
            if iou[row, col] < self.minimum_iou_threshold:
                continue
            track = tracks[row]
            track.update(boxes[chosen[col]])
            if track.updates >= self.minimum_consecutive_frames and track.track_id == -1:
                track.track_id, self._next_id = self._next_id, self._next_id + 1
            ids[chosen[col]] = track.track_id
            matched_tracks.add(row)
            matched_boxes.add(col)
        left = [t for i, t in enumerate(tracks) if i not in matched_tracks]
        return left, [int(chosen[c]) for c in range(len(chosen)) if c not in matched_boxes]
