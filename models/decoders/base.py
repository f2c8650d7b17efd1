"""The decoder contract: raw output arrays + model description + geometry -> detections in original pixels."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from edge_inference.models.decoders.nms import class_aware_nms, top_candidates
from edge_inference.models.detection import BoxXYXY, Detection
from edge_inference.models.labels import label_for
from edge_inference.models.preprocess import Quantization
from edge_inference.models.spec import ModelSpec
from edge_inference.models.transform import ImageTransform


@dataclass(frozen=True)
class DecodeContext:
    spec: ModelSpec
    transform: ImageTransform
    conf_threshold: float = 0.25
    iou_threshold: float = 0.45
    max_detections: int = 100
    # Per output, for decoders that take integer outputs as they are (`Decoder.quantized`): real = s * (q - zp)
    quantization: tuple[Quantization | None, ...] = ()


def dequantize(values: np.ndarray, quant: Quantization | None) -> np.ndarray:
    if quant is None or not np.issubdtype(values.dtype, np.integer):
        return values
    return (values.astype(np.float32) - np.float32(quant.zero_point)) * np.float32(quant.scale)


DecodeFn = Callable[[Sequence[np.ndarray], DecodeContext], list[Detection]]
# (output shapes without nothing removed, input width, input height, strides) -> does this layout fit?
MatchFn = Callable[[Sequence[tuple[int, ...]], int, int, tuple[int, ...]], bool]


@dataclass(frozen=True)
class Decoder:
    name: str
    description: str
    layout: str
    matches: MatchFn
    decode: DecodeFn
    # Pre-processing the family is trained with; a sidecar or flags override any of it.
    preprocessing: dict[str, object] = field(default_factory=dict)
    default_labels: str = "coco80"
    # False: never guessed from output shapes alone (they fit too much), only named by metadata or the user
    detectable: bool = True
    # True: takes integer outputs still quantised (it filters scores before converting), with ctx.quantization
    quantized: bool = False


def grid_cells(width: int, height: int, strides: tuple[int, ...]) -> list[int]:
    return [(height // s) * (width // s) for s in strides]


def squeeze_batch(array: np.ndarray) -> np.ndarray:
    return array[0] if array.ndim >= 2 and array.shape[0] == 1 else array


def to_detections(
    boxes_input_px: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, ctx: DecodeContext, *, nms: bool = True
) -> list[Detection]:
    """Cap candidates, suppress overlaps, map to original pixels, attach labels."""
    if scores.size == 0:
        return []
    top = top_candidates(scores)
    boxes_input_px, scores, class_ids = boxes_input_px[top], scores[top], class_ids[top]
    if nms:
        keep = class_aware_nms(boxes_input_px, scores, class_ids, ctx.iou_threshold, ctx.max_detections)
    else:
        keep = np.argsort(-scores, kind="stable")[: ctx.max_detections]
    boxes = ctx.transform.boxes_to_original(boxes_input_px[keep].astype(np.float64, copy=True))
    detections = []
    for box, score, class_id in zip(boxes.tolist(), scores[keep].tolist(), class_ids[keep].tolist(), strict=True):
        if box[2] - box[0] <= 0 or box[3] - box[1] <= 0:
            continue
        cid = int(class_id)
        detections.append(Detection(cid, label_for(ctx.spec.labels, cid), float(score), BoxXYXY(*box)))
    return detections


def xywh_to_xyxy(xywh: np.ndarray) -> np.ndarray:
    out = np.empty_like(xywh, dtype=np.float32)
    half_w, half_h = xywh[:, 2] / 2, xywh[:, 3] / 2
    out[:, 0] = xywh[:, 0] - half_w
    out[:, 1] = xywh[:, 1] - half_h
    out[:, 2] = xywh[:, 0] + half_w
    out[:, 3] = xywh[:, 1] + half_h
    return out
