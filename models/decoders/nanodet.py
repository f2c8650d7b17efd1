"""NanoDet GFL head: per level, class scores (sigmoid applied) and a distribution over distances per side."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from edge_inference.models.decoders.base import DecodeContext, Decoder, grid_cells, to_detections
from edge_inference.models.detection import Detection


@lru_cache(maxsize=8)
def _centres(width: int, height: int, stride: int) -> np.ndarray:
    ys, xs = np.meshgrid(np.arange(height // stride), np.arange(width // stride), indexing="ij")
    offset = 0.5 * (stride - 1)
    return np.stack((xs * stride + offset, ys * stride + offset), axis=-1).reshape(-1, 2).astype(np.float32)


def _levels(outputs: Sequence[np.ndarray], ctx: DecodeContext) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Pair class and regression outputs per stride by their cell count; names are not reliable."""
    pre = ctx.spec.preprocessing
    arrays = [o.reshape(o.shape[-2], o.shape[-1]) for o in outputs]
    levels = []
    for stride, cells in zip(ctx.spec.strides, grid_cells(pre.width, pre.height, ctx.spec.strides), strict=True):
        same = [a for a in arrays if a.shape[0] == cells]
        reg_width = 4 * (ctx.spec.reg_max + 1)
        # the configured bin count, else the output that is not the class scores (YOLOv8 heads have 16 bins)
        reg = next((a for a in same if a.shape[1] == reg_width), None)
        if reg is None:
            reg = next(a for a in same if a.shape[1] != len(ctx.spec.labels) and a.shape[1] % 4 == 0)
        cls = next(a for a in same if a is not reg)
        levels.append((stride, cls, reg))
    return levels


def decode_nanodet(outputs: Sequence[np.ndarray], ctx: DecodeContext) -> list[Detection]:
    pre = ctx.spec.preprocessing
    all_boxes, all_scores, all_ids = [], [], []
    for stride, cls, reg in _levels(outputs, ctx):
        best = cls.max(axis=1)
        rows = np.flatnonzero(best > ctx.conf_threshold)
        if rows.size == 0:
            continue
        bins = reg.shape[1] // 4
        logits = reg[rows].reshape(-1, 4, bins)
        weights = np.exp(logits - logits.max(axis=2, keepdims=True))
        weights /= weights.sum(axis=2, keepdims=True)
        distances = (weights @ np.arange(bins, dtype=np.float32)) * stride  # (rows, 4): left, top, right, bottom
        centre = _centres(pre.width, pre.height, stride)[rows]
        boxes = np.concatenate((centre - distances[:, :2], centre + distances[:, 2:]), axis=1)
        all_boxes.append(boxes)
        all_scores.append(best[rows])
        all_ids.append(cls[rows].argmax(axis=1))
    if not all_boxes:
        return []
    return to_detections(np.concatenate(all_boxes), np.concatenate(all_scores), np.concatenate(all_ids), ctx)


def _matches_nanodet(shapes: Sequence[tuple[int, ...]], w: int, h: int, strides: tuple[int, ...]) -> bool:
    if len(shapes) != 2 * len(strides) or any(len(s) not in (2, 3) for s in shapes):
        return False
    cells = sorted(s[-2] for s in shapes)
    expected = sorted(grid_cells(w, h, strides) * 2)
    return cells == expected


NANODET = Decoder(
    "nanodet",
    "NanoDet GFL: per-level class scores + distance distributions (reg_max+1 bins x 4 sides)",
    "2 x levels outputs: [1, cells, C] and [1, cells, 4*(reg_max+1)]",
    _matches_nanodet,
    decode_nanodet,
    {
        "color": "BGR",
        "anchor": "center",
        "pad_value": 0,
        "mean": (103.53, 116.28, 123.675),
        "std": (57.375, 57.12, 58.395),
    },
)
