"""YOLO-family heads: YOLOX raw grid, YOLOv5 decoded, Ultralytics YOLOv8/v11, end-to-end YOLOv10/YOLO26."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from edge_inference.models.decoders.base import (
    DecodeContext,
    Decoder,
    dequantize,
    grid_cells,
    squeeze_batch,
    to_detections,
    xywh_to_xyxy,
)
from edge_inference.models.detection import Detection
from edge_inference.models.preprocess import Quantization

_ULTRALYTICS_INPUT = {"color": "RGB", "anchor": "center", "pad_value": 114, "mean": (0, 0, 0), "std": (255, 255, 255)}


def _single(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...] | None:
    if len(shapes) != 1:
        return None
    shape = shapes[0]
    # a batch left open (-1: a torch export's `dynamic_axes`) is one frame here, as the pipeline runs them
    return shape[1:] if len(shape) == 3 and shape[0] in (1, -1) else (shape if len(shape) == 2 else None)


@lru_cache(maxsize=8)
def _yolox_grid(width: int, height: int, strides: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Cell offsets (N, 2) and per-cell stride (N, 1) in the order YOLOX flattens its levels."""
    grids, steps = [], []
    for s in strides:
        ys, xs = np.meshgrid(np.arange(height // s), np.arange(width // s), indexing="ij")
        grids.append(np.stack((xs, ys), axis=-1).reshape(-1, 2))
        steps.append(np.full((grids[-1].shape[0], 1), s))
    return np.concatenate(grids).astype(np.float32), np.concatenate(steps).astype(np.float32)


def _objectness_candidates(pred: np.ndarray, conf: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows whose objectness x best class score passes; objectness alone bounds the score, so filter on it first."""
    rows = np.flatnonzero(pred[:, 4] > conf)
    cls = pred[rows, 5:]
    class_ids = cls.argmax(axis=1)
    scores = pred[rows, 4] * cls[np.arange(rows.size), class_ids]
    passed = scores > conf
    return rows[passed], scores[passed], class_ids[passed]


def decode_yolox(outputs: Sequence[np.ndarray], ctx: DecodeContext) -> list[Detection]:
    pred = squeeze_batch(outputs[0])
    pre = ctx.spec.preprocessing
    rows, scores, class_ids = _objectness_candidates(pred, ctx.conf_threshold)
    grid, stride = _yolox_grid(pre.width, pre.height, ctx.spec.strides)
    xywh = np.empty((rows.size, 4), dtype=np.float32)
    xywh[:, :2] = (pred[rows, :2] + grid[rows]) * stride[rows]
    xywh[:, 2:] = np.exp(pred[rows, 2:4]) * stride[rows]
    return to_detections(xywh_to_xyxy(xywh), scores, class_ids, ctx)


def decode_yolov5(outputs: Sequence[np.ndarray], ctx: DecodeContext) -> list[Detection]:
    pred = squeeze_batch(outputs[0])
    rows, scores, class_ids = _objectness_candidates(pred, ctx.conf_threshold)
    boxes = xywh_to_xyxy(pred[rows, :4])
    return to_detections(_denormalise(boxes, pred[:, :4], ctx), scores, class_ids, ctx)


def decode_yolov8(outputs: Sequence[np.ndarray], ctx: DecodeContext) -> list[Detection]:
    pred = squeeze_batch(outputs[0])  # (4 + C, N): one column per anchor point
    quant = ctx.quantization[0] if ctx.quantization else None
    if quant is not None and np.issubdtype(pred.dtype, np.integer):
        return _decode_yolov8_quantized(pred, quant, ctx)
    best = pred[4:].max(axis=0)
    cols = np.flatnonzero(best > ctx.conf_threshold)
    class_ids = pred[4:, cols].argmax(axis=0)
    boxes = xywh_to_xyxy(pred[:4, cols].T)
    return to_detections(_denormalise(boxes, pred[:4].T, ctx), best[cols], class_ids, ctx)


def _decode_yolov8_quantized(pred: np.ndarray, quant: Quantization, ctx: DecodeContext) -> list[Detection]:
    """An int8 head: the best class score of each column is compared in the integer domain (real > conf exactly
    when q > conf / scale + zero_point, the scale being positive), and only the few columns that pass are turned
    into floats, instead of all 84 x 8400 values."""
    best_q = pred[4:].max(axis=0)
    cols = np.flatnonzero(best_q > ctx.conf_threshold / quant.scale + quant.zero_point)
    kept = dequantize(pred[:, cols], quant)
    class_ids = kept[4:].argmax(axis=0)
    boxes = xywh_to_xyxy(kept[:4].T)
    extremes = dequantize(np.array([pred[:4].min(), pred[:4].max()], dtype=pred.dtype), quant)
    return to_detections(_denormalise(boxes, extremes, ctx), kept[4:].max(axis=0), class_ids, ctx)


def decode_end2end(outputs: Sequence[np.ndarray], ctx: DecodeContext) -> list[Detection]:
    pred = squeeze_batch(outputs[0])  # (N, 6): x1, y1, x2, y2, score, class; already NMS-free
    rows = np.flatnonzero(pred[:, 4] > ctx.conf_threshold)
    boxes = np.ascontiguousarray(pred[rows, :4], dtype=np.float32)
    class_ids = pred[rows, 5].astype(np.int64)
    return to_detections(_denormalise(boxes, pred[:, :4], ctx), pred[rows, 4], class_ids, ctx, nms=False)


def _denormalise(boxes: np.ndarray, all_coords: np.ndarray, ctx: DecodeContext) -> np.ndarray:
    """Scale 0..1 boxes to input pixels. Unless the spec says, coordinates that never exceed ~1 are normalised."""
    normalized = ctx.spec.boxes_normalized
    if normalized is None:
        normalized = bool(all_coords.size) and float(np.abs(all_coords).max()) <= 1.5
    if normalized:
        boxes[:, 0::2] *= ctx.spec.preprocessing.width
        boxes[:, 1::2] *= ctx.spec.preprocessing.height
    return boxes


def _matches_yolox(shapes: Sequence[tuple[int, ...]], w: int, h: int, strides: tuple[int, ...]) -> bool:
    shape = _single(shapes)
    return shape is not None and shape[1] > 5 and shape[0] == sum(grid_cells(w, h, strides))


def _matches_yolov5(shapes: Sequence[tuple[int, ...]], w: int, h: int, strides: tuple[int, ...]) -> bool:
    shape = _single(shapes)
    return shape is not None and shape[1] > 5 and shape[0] == 3 * sum(grid_cells(w, h, strides))


def _matches_yolov8(shapes: Sequence[tuple[int, ...]], w: int, h: int, strides: tuple[int, ...]) -> bool:
    shape = _single(shapes)
    return shape is not None and shape[0] > 4 and shape[1] == sum(grid_cells(w, h, strides))


def _matches_end2end(shapes: Sequence[tuple[int, ...]], w: int, h: int, strides: tuple[int, ...]) -> bool:
    shape = _single(shapes)
    return shape is not None and shape[1] == 6


YOLOX = Decoder(
    "yolox",
    "YOLOX raw head: grid/stride decode, score = objectness x class",
    "[1, N, 5+C], N = grid cells",
    _matches_yolox,
    decode_yolox,
    {"color": "BGR", "anchor": "top-left", "pad_value": 114, "mean": (0, 0, 0), "std": (1, 1, 1)},
)
YOLOV5 = Decoder(
    "yolov5",
    "YOLOv5 decoded boxes (cx, cy, w, h) with objectness",
    "[1, N, 5+C], N = 3 x grid cells",
    _matches_yolov5,
    decode_yolov5,
    _ULTRALYTICS_INPUT,
)
YOLOV8 = Decoder(
    "yolov8",
    "Ultralytics YOLOv8/v11: (cx, cy, w, h) + class scores, no objectness",
    "[1, 4+C, N]",
    _matches_yolov8,
    decode_yolov8,
    _ULTRALYTICS_INPUT,
    quantized=True,
)
END2END = Decoder(
    "yolo-end2end",
    "NMS-free YOLO (YOLOv10 / YOLO26): x1, y1, x2, y2, score, class",
    "[1, N, 6]",
    _matches_end2end,
    decode_end2end,
    _ULTRALYTICS_INPUT,
)
