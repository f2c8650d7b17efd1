"""Agreement between two detectors: mAP@0.5 of a candidate's detections scored against a reference's.

The reference's detections play the part of ground truth; the candidate's, ranked by score, are matched to them
greedily (same class, same frame, IoU >= threshold). AP is the all-point interpolated area under precision/recall.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from edge_inference.models.detection import Detection

# A class counts in the headline figure once the reference found it this many times, where any class was: one
# seen once or twice (often the reference's own box at the threshold) weighed in the class mean as much as people,
# and three such boxes moved `edge bench`'s figure for an int8 model from 0.99 to 0.56
ENOUGH_BOXES = 10


@dataclass(frozen=True)
class Agreement:
    map50: float | None  # over the classes with ENOUGH_BOXES (all, where none has); None: the reference found nothing
    per_class: dict[str, float]
    reference_count: int
    candidate_count: int
    boxes: dict[str, int] = field(default_factory=dict)  # per class: the reference's boxes

    @property
    def map50_every_class(self) -> float | None:
        return float(np.mean(list(self.per_class.values()))) if self.per_class else None

    def to_dict(self) -> dict[str, object]:
        every = self.map50_every_class
        return {
            "map50": None if self.map50 is None else round(self.map50, 4),
            "map50_every_class": None if every is None else round(every, 4),
            "classes_with_enough_boxes": sorted(k for k, n in self.boxes.items() if n >= ENOUGH_BOXES),
            "per_class": {k: round(v, 4) for k, v in sorted(self.per_class.items())},
            "reference_detections": self.reference_count,
            "candidate_detections": self.candidate_count,
        }


def _iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ix = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    iy = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = ix * iy
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-9)


def average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    r = np.concatenate(([0.0], recall, [1.0]))
    p = np.concatenate(([1.0], precision, [0.0]))
    p = np.maximum.accumulate(p[::-1])[::-1]  # precision envelope
    steps = np.flatnonzero(r[1:] != r[:-1])
    return float(np.sum((r[steps + 1] - r[steps]) * p[steps + 1]))


def _match_frame(refs: list[Detection], cands: list[Detection], iou_threshold: float) -> list[tuple[float, bool]]:
    """(score, matched) for one class in one frame: greedy by score, each reference box matched at most once."""
    if not refs:
        return [(d.score, False) for d in cands]
    ious = _iou_matrix(
        np.array([[d.box.x1, d.box.y1, d.box.x2, d.box.y2] for d in cands]),
        np.array([[d.box.x1, d.box.y1, d.box.x2, d.box.y2] for d in refs]),
    )
    taken = np.zeros(len(refs), dtype=bool)
    scored = []
    for row, det in enumerate(cands):
        best = int(np.argmax(np.where(taken, -1.0, ious[row])))
        hit = bool(not taken[best] and ious[row, best] >= iou_threshold)
        taken[best] |= hit
        scored.append((det.score, hit))
    return scored


def _class_ap(scored: list[tuple[float, bool]], count: int) -> float:
    ranked = sorted(scored, key=lambda pair: -pair[0])
    hits = np.array([hit for _, hit in ranked], dtype=bool)
    tp, fp = np.cumsum(hits), np.cumsum(~hits)
    recall = tp / count if hits.size else np.zeros(0)
    precision = tp / np.maximum(tp + fp, 1) if hits.size else np.zeros(0)
    return average_precision(recall, precision)


def _score_frame(
    ref_frame: Sequence[Detection],
    cand_frame: Sequence[Detection],
    iou_threshold: float,
    truth: dict[str, int],
    scored: dict[str, list[tuple[float, bool]]],
) -> None:
    """Add one frame's reference counts and scored candidates, class by class."""
    for label in {d.label for d in ref_frame} | {d.label for d in cand_frame}:
        refs = [d for d in ref_frame if d.label == label]
        cands = sorted((d for d in cand_frame if d.label == label), key=lambda d: -d.score)
        truth[label] += len(refs)
        if cands:
            scored[label] += _match_frame(refs, cands, iou_threshold)


def agreement(
    reference: Sequence[Sequence[Detection]], candidate: Sequence[Sequence[Detection]], iou_threshold: float = 0.5
) -> Agreement:
    """`reference[i]` and `candidate[i]` are the detections of the same frame i."""
    if len(reference) != len(candidate):
        raise ValueError("reference and candidate must cover the same frames")
    truth: dict[str, int] = defaultdict(int)
    scored: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    for ref_frame, cand_frame in zip(reference, candidate, strict=True):
        _score_frame(ref_frame, cand_frame, iou_threshold, truth, scored)
    # a class only the candidate saw has no ground truth to score against
    per_class = {label: _class_ap(scored.get(label, []), count) for label, count in truth.items() if count}
    enough = [ap for label, ap in per_class.items() if truth[label] >= ENOUGH_BOXES] or list(per_class.values())
    return Agreement(
        map50=float(np.mean(enough)) if enough else None,
        per_class=per_class,
        reference_count=sum(len(f) for f in reference),
        candidate_count=sum(len(f) for f in candidate),
        boxes={label: count for label, count in truth.items() if count},
    )
