"""ByteTrack as Roboflow's `trackers` 2.1 computes it (`ByteTrackTracker`), without `supervision` and SciPy.

The library is the reference: `tests/test_tracker_library.py` runs both on the same detections (a real video's
and synthetic crowds) and requires the same track id on every detection of every frame, and the same Kalman
state, to the bit, for every track. What differs is the cost: the library keeps an object per track, wraps each
matched box in a deep-copied `sv.Detections` and merges them, and importing it loads supervision, SciPy and
Matplotlib (about 70 MiB). Here a frame is two arrays in and one array of ids out, and the tracks are rows of
arrays updated together.

Kept exactly: the Kalman filter (float32, its matrices and its order of operations), the IoU (float64, cast to
float32), the two association steps (high scores, then low scores against the tracks left), the optimal
assignment that maximises total IoU with matches below `minimum_iou_threshold` dropped afterwards, when an id is
given (after `minimum_consecutive_frames` updates), and which tracks survive. One addition, which streams use: with
`lost_after_s` a lost track goes after that many seconds of the frames' own clock instead of a count of frames, the
same tracks where frames come at the rate the count assumes.

The assignment: SciPy's `linear_sum_assignment(maximize=True)` over the whole matrix. Its optimum's positive
entries are a maximum-weight matching of the positive IoUs (zeros add nothing), so each group of tracks and boxes
that overlap one another is solved on its own: almost always one track and one box.
"""

from __future__ import annotations

import math
from collections import Counter
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
    that are seen on every frame go through the same few: each step is computed once per covariance array, and
    its result is shared by every track that holds that array (so the results are the library's to the bit).
    Keyed by the array's identity; each entry keeps its array alive, so an identity is never reused while it is a
    key. Cleared when it grows past `LIMIT` entries."""

    LIMIT = 4096

    def __init__(self) -> None:
        self.initial = np.eye(8, dtype=np.float32)
        self._predicted: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._updated: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def predict(self, p: np.ndarray) -> np.ndarray:
        found = self._predicted.get(id(p))
        if found is None:
            self._trim(self._predicted)
            found = self._predicted[id(p)] = (p, F @ p @ F_T + Q)
        return found[1]

    def update(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the Kalman gain, the covariance after the update)."""
        found = self._updated.get(id(p))
        if found is None:
            self._trim(self._updated)
            gain = p @ H_T @ np.linalg.inv(H @ p @ H_T + R)
            found = self._updated[id(p)] = (p, gain, (I8 - gain @ H) @ p)
        return found[1], found[2]

    def _trim(self, table: dict[int, Any]) -> None:
        if len(table) >= self.LIMIT:
            table.clear()


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of `a` with every box of `b`, as supervision's `box_iou_batch` rounds it (float64, then
    float32); the corners' min and max are taken for x and y together."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    sides = np.minimum(a[:, None, 2:], b[None, :, 2:]) - np.maximum(a[:, None, :2], b[None, :, :2])
    np.maximum(sides, 0.0, out=sides)
    inter = sides[..., 0] * sides[..., 1]
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    out = np.zeros(inter.shape, dtype=np.float32)
    np.divide(inter, union, out=out, where=union > 0)
    return out


def best_assignment(weights: np.ndarray) -> list[tuple[int, int]]:
    """(row, column) pairs of a matching with the largest total weight, sorted by row; zero entries never pair.

    Plain Python past the first NumPy call: there are a few dozen links (almost all one track on one box), where
    each further NumPy operation on the whole matrix would cost more than the work it does."""
    rows_of, cols_of = (axis.tolist() for axis in np.nonzero(weights > 0))
    if not rows_of:
        return []
    values: list[list[float]] = weights.tolist()  # float32 to Python floats: exact, as astype(float64)
    row_links, col_links = Counter(rows_of), Counter(cols_of)
    pairs: list[tuple[int, int]] = []
    rest_rows, rest_cols = [], []
    for row, col in zip(rows_of, cols_of, strict=True):
        if row_links[row] == 1 and col_links[col] == 1:  # one track on one box: most of them
            pairs.append((row, col))
        else:
            rest_rows.append(row)
            rest_cols.append(col)
    for rows, cols in overlapping_groups(rest_rows, rest_cols):
        block = [[values[r][c] for c in cols] for r in rows]
        pairs += [(rows[r], cols[c]) for r, c in solve_group(block)]
    return sorted(pairs)


def solve_group(block: list[list[float]]) -> list[tuple[int, int]]:
    """The best pairs within one group of overlapping tracks (rows) and boxes (columns)."""
    if len(block) == 1 or len(block[0]) == 1:
        flat = [w for line in block for w in line]
        return [divmod(flat.index(max(flat)), len(block[0]))]  # the first largest, as argmax
    if len(block) == len(block[0]) == 2:
        return pair_of_two(block)
    return [(r, c) for r, c in hungarian_max(block) if block[r][c] > 0]


def pair_of_two(block: list[list[float]]) -> list[tuple[int, int]]:
    """The better of the two ways to pair two tracks with two boxes (the commonest group: two people close)."""
    (a, b), (c, d) = block
    chosen = [(0, 0), (1, 1)] if a + d >= b + c else [(0, 1), (1, 0)]
    return [(r, col) for r, col in chosen if block[r][col] > 0]


def overlapping_groups(rows_of: list[int], cols_of: list[int]) -> list[tuple[list[int], list[int]]]:
    """The connected groups of rows and columns linked by the pairs (rows_of[i], cols_of[i])."""
    cols_by_row: dict[int, list[int]] = {}
    rows_by_col: dict[int, list[int]] = {}
    for row, col in zip(rows_of, cols_of, strict=True):
        cols_by_row.setdefault(row, []).append(col)
        rows_by_col.setdefault(col, []).append(row)
    groups, grouped = [], set()
    for start in cols_by_row:
        if start in grouped:
            continue
        rows, cols, frontier = {start}, set(), [start]
        while frontier:
            for col in cols_by_row[frontier.pop()]:
                if col not in cols:
                    cols.add(col)
                    reached = [row for row in rows_by_col[col] if row not in rows]
                    rows.update(reached)
                    frontier += reached
        grouped |= rows
        groups.append((sorted(rows), sorted(cols)))
    return groups


def hungarian_max(weights: list[list[float]]) -> list[tuple[int, int]]:
    """An assignment of largest total weight (the Hungarian method with potentials, O(n^2 m)); rows <= columns
    or the transpose is solved."""
    if len(weights) > len(weights[0]):
        return [(r, c) for c, r in hungarian_max([list(column) for column in zip(*weights, strict=True)])]
    n, m = len(weights), len(weights[0])
    cost = [[-w for w in line] for line in weights]
    u, v = [0.0] * (n + 1), [0.0] * (m + 1)
    owner = [0] * (m + 1)  # column -> row (1-based; 0 = free)
    for row in range(1, n + 1):
        _augment(row, cost, u, v, owner)
    return sorted((owner[col] - 1, col - 1) for col in range(1, m + 1) if owner[col])


def _augment(row: int, cost: list[list[float]], u: list[float], v: list[float], owner: list[int]) -> None:
    """Give `row` a column along a shortest augmenting path, updating the potentials `u`, `v` and `owner`."""
    m = len(v) - 1
    owner[0], col0 = row, 0
    slack, way, used = [math.inf] * (m + 1), [0] * (m + 1), [False] * (m + 1)
    while owner[col0]:
        used[col0] = True
        r0, delta, col1 = owner[col0], math.inf, 0
        costs, potential = cost[r0 - 1], u[r0]
        for col in range(1, m + 1):
            if not used[col]:
                reduced = costs[col - 1] - potential - v[col]
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


class ByteTracker:
    """`update(boxes, scores)` -> a track id per box (-1: not tracked, or not yet sure).

    The tracks are rows of arrays (the library keeps one object per track): each row's Kalman state
    (x1, y1, x2, y2, vx1, vy1, vx2, vy2), its covariance (shared arrays, see `Covariances`), frames since its last
    update, its updates, its id. A frame's predict and update are a few array operations over all rows: the
    predict's `F @ state` is `state[:4] + state[4:]` (one rounding, as in the product with ones and zeros), and the
    update's `K @ y` is the same BLAS call per row inside `np.matmul`, so the states are the library's to the bit.
    """

    def __init__(
        self,
        lost_track_buffer: int = 30,
        frame_rate: float = 30.0,
        track_activation_threshold: float = 0.7,
        minimum_consecutive_frames: int = 2,
        minimum_iou_threshold: float = 0.1,
        high_conf_det_threshold: float = 0.6,
        lost_after_s: float | None = None,
    ) -> None:
        self.maximum_frames_without_update = int(frame_rate / 30.0 * lost_track_buffer)
        # Given, a track is lost after this many seconds of `update`'s clock without a match instead of after a
        # count of frames: the count stretches in seconds when frames come slower than `frame_rate` (a Pi behind a
        # 30 fps camera processing 5 a second kept a lost track 6x as long).
        self.lost_after_s = lost_after_s
        self.minimum_consecutive_frames = minimum_consecutive_frames
        self.minimum_iou_threshold = minimum_iou_threshold
        self.track_activation_threshold = track_activation_threshold
        self.high_conf_det_threshold = high_conf_det_threshold
        self._covariances = Covariances()
        self.states = np.zeros((0, 8), dtype=np.float32)
        self.covariances: list[np.ndarray] = []
        self.since_update = np.zeros(0, dtype=np.int64)
        self.updates = np.zeros(0, dtype=np.int64)
        self.track_ids = np.zeros(0, dtype=np.int64)
        self.matched_at = np.zeros(0, dtype=np.float64)  # the clock of each track's last match (or its start)
        self._next_id = 0
        self._now = 0.0

    @property
    def held_ids(self) -> frozenset[int]:
        """The ids of the sure tracks still kept, lost ones included: any of them may be matched again."""
        return frozenset(self.track_ids[self.track_ids >= 0].tolist())

    def update(
        self, boxes: np.ndarray, scores: np.ndarray, now: float = 0.0, still_until: float | None = None
    ) -> np.ndarray:
        """boxes: (N, 4) float32 x1 y1 x2 y2; scores: (N,); now: the frame's time in seconds, for `lost_after_s`;
        still_until: the time of the latest frame skipped because nothing moved (a motion gate), if any: what the
        previous update matched was still there then, if that came after it (a parked car the detector misses on one
        of its rare checks is not lost for the whole still spell before it)."""
        ids = np.full(len(boxes), -1, dtype=np.int64)
        if not len(self.track_ids) and not len(boxes):
            return ids
        self._now = now
        self._predict()
        if still_until is not None:  # never past this frame: a skipped frame may be newer than the one tracked here
            seen_last_time = self.since_update == 1
            self.matched_at[seen_last_time] = np.maximum(self.matched_at[seen_last_time], min(still_until, now))
        high = np.flatnonzero(scores >= self.high_conf_det_threshold)
        low = np.flatnonzero(~(scores >= self.high_conf_det_threshold))
        rows = np.arange(len(self.track_ids))
        left, unmatched_high = self._associate(rows, boxes, high, ids)
        self._associate(left, boxes, low, ids)
        # ascending, as the library's set of ints iterates
        self._add([i for i in unmatched_high if float(scores[i]) >= self.track_activation_threshold], boxes)
        self._keep(self._recent() & ((self.updates >= self.minimum_consecutive_frames) | (self.since_update == 0)))
        return ids

    def _recent(self) -> np.ndarray:
        """The tracks not yet lost for good."""
        if self.lost_after_s is None:
            return self.since_update < self.maximum_frames_without_update
        # a microsecond's grace: a clock in whole frames (i / fps) loses a track on the frame the count would
        return self._now - self.matched_at < self.lost_after_s - 1e-6

    def _predict(self) -> None:
        self.states[:, :4] += self.states[:, 4:]
        self.covariances = [self._covariances.predict(p) for p in self.covariances]
        self.since_update += 1

    def _associate(
        self, rows: np.ndarray, boxes: np.ndarray, chosen: np.ndarray, ids: np.ndarray
    ) -> tuple[np.ndarray, list[int]]:
        """Match the tracks `rows` to the boxes `chosen`, update the matched tracks and write their ids; returns
        the rows and the chosen boxes (indices into `boxes`) left unmatched."""
        if not len(rows) or not len(chosen):
            return rows, chosen.tolist()
        iou = iou_matrix(self.states[rows, :4], boxes[chosen])
        pairs = [(r, c) for r, c in best_assignment(iou) if iou[r, c] >= self.minimum_iou_threshold]
        if not pairs:
            return rows, chosen.tolist()
        matched_rows, matched_cols = (np.array(side, dtype=np.int64) for side in zip(*pairs, strict=True))
        tracks, found = rows[matched_rows], chosen[matched_cols]
        self._correct(tracks, boxes[found])
        sure = (self.updates[tracks] >= self.minimum_consecutive_frames) & (self.track_ids[tracks] == -1)
        new_ids = self._next_id + np.arange(int(sure.sum()))  # in row order, as the library gives them
        self.track_ids[tracks[sure]] = new_ids
        self._next_id += len(new_ids)
        ids[found] = self.track_ids[tracks]
        unmatched_rows, unmatched_cols = np.ones(len(rows), dtype=bool), np.ones(len(chosen), dtype=bool)
        unmatched_rows[matched_rows] = unmatched_cols[matched_cols] = False
        return rows[unmatched_rows], chosen[unmatched_cols].tolist()

    def _correct(self, tracks: np.ndarray, measured: np.ndarray) -> None:
        """The Kalman update of the rows `tracks` with their boxes."""
        self.since_update[tracks] = 0
        self.matched_at[tracks] = self._now
        self.updates[tracks] += 1
        gains = []
        for row in tracks.tolist():
            gain, self.covariances[row] = self._covariances.update(self.covariances[row])
            gains.append(gain)
        innovation = (measured - self.states[tracks, :4])[:, :, None]
        # one gain for all (tracks that share a covariance share its gain): broadcast, the same BLAS call
        gain = gains[0] if all(g is gains[0] for g in gains) else np.array(gains)
        self.states[tracks] += np.matmul(gain, innovation)[:, :, 0]

    def _add(self, chosen: list[int], boxes: np.ndarray) -> None:
        count = len(chosen)
        if not count:
            return
        states = np.zeros((count, 8), dtype=np.float32)
        states[:, :4] = boxes[chosen]
        self.states = np.concatenate([self.states, states])
        self.covariances += [self._covariances.initial] * count
        self.since_update = np.concatenate([self.since_update, np.zeros(count, dtype=np.int64)])
        self.updates = np.concatenate([self.updates, np.ones(count, dtype=np.int64)])
        self.track_ids = np.concatenate([self.track_ids, np.full(count, -1, dtype=np.int64)])
        self.matched_at = np.concatenate([self.matched_at, np.full(count, self._now)])

    def _keep(self, kept: np.ndarray) -> None:
        if kept.all():
            return
        self.states, self.since_update = self.states[kept], self.since_update[kept]
        self.updates, self.track_ids = self.updates[kept], self.track_ids[kept]
        self.matched_at = self.matched_at[kept]
        self.covariances = [p for p, keep in zip(self.covariances, kept.tolist(), strict=True) if keep]
