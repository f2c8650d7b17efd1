"""rknn_model_zoo's YOLOv8/YOLO11 heads: DFL outside the model, each stride split into branches, NCHW.

Per stride (8, 16, 32 in that order), as airockchip's export writes them and `examples/yolov8/python/yolov8.py`
reads them: a box branch (1, 4*R, H, W) of DFL logits (R = 16 bins per side), a class branch (1, C, H, W) of class
probabilities (the sigmoid is inside the model) and, in most exports, a class-sum branch (1, 1, H, W): the clipped
sum of the class scores, which bounds every class score and so rules cells out cheaply. Rockchip splits the head
because one int8 tensor holding coordinates (0-640) and scores (0-1) quantises the scores badly. Integer outputs
arrive here already converted to real values (RKNNLite returns floats by default).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edge_inference.models.decoders.base import DecodeContext, Decoder, to_detections
from edge_inference.models.detection import Detection


def _branches(count: int, levels: int) -> int:
    """Outputs per stride: 2 (box, class) or 3 (box, class, class sum)."""
    return count // levels if count % levels == 0 and count // levels in (2, 3) else 0


def _level_fits(group: Sequence[tuple[int, ...]], w: int, h: int, stride: int) -> bool:
    grid = (h // stride, w // stride)
    if any(len(shape) != 4 or shape[0] != 1 or shape[2:] != grid for shape in group):
        return False
    box, classes = group[0][1], group[1][1]
    return box % 4 == 0 and box >= 8 and classes >= 1 and (len(group) == 2 or group[2][1] == 1)


def _matches_split(shapes: Sequence[tuple[int, ...]], w: int, h: int, strides: tuple[int, ...]) -> bool:
    per = _branches(len(shapes), len(strides))
    return bool(per) and all(
        _level_fits(shapes[i * per : (i + 1) * per], w, h, stride) for i, stride in enumerate(strides)
    )


def _dfl_distances(box: np.ndarray) -> np.ndarray:
    """(4*R, n) DFL logits -> (4, n) distances in cells: the expectation of each side's softmax over R bins."""
    bins = box.shape[0] // 4
    logits = box.reshape(4, bins, -1)
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (weights * np.arange(bins, dtype=np.float32)[None, :, None]).sum(axis=1) / weights.sum(axis=1)


def _decode_level(
    outputs: Sequence[np.ndarray], first: int, per: int, ctx: DecodeContext
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boxes (input pixels), scores and class ids of one stride's cells that pass the threshold."""
    box, classes = outputs[first][0], outputs[first + 1][0]
    grid_h, grid_w = classes.shape[1:]
    cells = np.arange(grid_h * grid_w)
    if per == 3:  # the class sum bounds every class score: cells below the threshold cannot pass
        cells = np.flatnonzero(outputs[first + 2][0].reshape(-1) > ctx.conf_threshold)
    scores_all = np.asarray(classes.reshape(classes.shape[0], -1)[:, cells], np.float32)
    best = scores_all.max(axis=0) if cells.size else np.empty(0, np.float32)
    keep = best > ctx.conf_threshold
    cells, class_ids = cells[keep], scores_all[:, keep].argmax(axis=0)
    distances = _dfl_distances(np.asarray(box.reshape(box.shape[0], -1)[:, cells], np.float32))
    pre = ctx.spec.preprocessing
    stride_x, stride_y = pre.width / grid_w, pre.height / grid_h
    centre_x, centre_y = cells % grid_w + 0.5, cells // grid_w + 0.5
    xyxy = np.stack(
        [
            (centre_x - distances[0]) * stride_x,
            (centre_y - distances[1]) * stride_y,
            (centre_x + distances[2]) * stride_x,
            (centre_y + distances[3]) * stride_y,
        ],
        axis=1,
    ).astype(np.float32)
    return xyxy, best[keep], class_ids


def decode_yolov8_split(outputs: Sequence[np.ndarray], ctx: DecodeContext) -> list[Detection]:
    levels = len(ctx.spec.strides)
    per = _branches(len(outputs), levels) or 3
    found = [_decode_level(outputs, i * per, per, ctx) for i in range(levels)]
    boxes = np.concatenate([f[0] for f in found])
    scores = np.concatenate([f[1] for f in found])
    class_ids = np.concatenate([f[2] for f in found])
    return to_detections(boxes, scores, class_ids, ctx)


YOLOV8_SPLIT = Decoder(
    "yolov8-rknn",
    "rknn_model_zoo YOLOv8/YOLO11: per stride a DFL box branch, class probabilities, optional class sum (NCHW)",
    "per stride [1, 4R, H, W], [1, C, H, W] (+ [1, 1, H, W]), strides 8, 16, 32",
    _matches_split,
    decode_yolov8_split,
    # the zoo letterboxes with black padding (its RGA pads with zeros) and compiles mean 0, std 255 into the model
    {"color": "RGB", "resize": "letterbox", "anchor": "center", "pad_value": 0, "mean": (0, 0, 0), "std": (255,) * 3},
)
