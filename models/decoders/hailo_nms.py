"""Hailo on-chip NMS, HailoRT's HAILO_NMS_BY_CLASS output in float32 (NMS already done on the device).

The buffer, as HailoRT documents it: for each class in turn, the number of boxes kept for that class (a float32),
then that many boxes of five float32 each: y_min, x_min, y_max, x_max (0..1 of the model input) and score. Classes
follow each other without gaps; the rest of the buffer (sized for the most boxes per class) is unused.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edge_inference.models.decoders.base import DecodeContext, Decoder, to_detections
from edge_inference.models.detection import Detection
from edge_inference.models.errors import ModelError

BOX_FLOATS = 5


def parse_nms_by_class(buffer: np.ndarray, classes: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(boxes [N, 4] y_min x_min y_max x_max, scores [N], class ids [N]) from one image's buffer."""
    flat = np.asarray(buffer, dtype=np.float32).reshape(-1)
    boxes, class_ids = [], []
    position, class_id = 0, 0
    while position < flat.size and (classes is None or class_id < classes):
        count = flat[position]
        position += 1
        if count != int(count) or count < 0 or position + int(count) * BOX_FLOATS > flat.size:
            raise ModelError(
                f"malformed Hailo NMS output: class {class_id} claims {count:g} boxes at float {position - 1} of "
                f"{flat.size}; is this output really HAILO_NMS_BY_CLASS in float32?"
            )
        end = position + int(count) * BOX_FLOATS
        boxes.append(flat[position:end].reshape(-1, BOX_FLOATS))
        class_ids.append(np.full(int(count), class_id, dtype=np.int64))
        position, class_id = end, class_id + 1
    rows = np.concatenate(boxes) if boxes else np.empty((0, BOX_FLOATS), np.float32)
    return rows[:, :4], rows[:, 4], np.concatenate(class_ids) if class_ids else np.empty(0, np.int64)


def decode_hailo_nms(outputs: Sequence[np.ndarray], ctx: DecodeContext) -> list[Detection]:
    classes = len(ctx.spec.labels) or None
    yxyx, scores, class_ids = parse_nms_by_class(outputs[0], classes)
    keep = scores > ctx.conf_threshold
    pre = ctx.spec.preprocessing
    xyxy = yxyx[keep][:, [1, 0, 3, 2]].astype(np.float32)
    xyxy[:, 0::2] *= pre.width
    xyxy[:, 1::2] *= pre.height
    return to_detections(xyxy, scores[keep], class_ids[keep], ctx, nms=False)


def _matches_hailo_nms(shapes: Sequence[tuple[int, ...]], w: int, h: int, strides: tuple[int, ...]) -> bool:
    """One flat buffer; only chosen when the engine says the output is Hailo NMS (a flat buffer says nothing)."""
    return len(shapes) == 1 and len([d for d in shapes[0] if d != 1]) <= 1


HAILO_NMS = Decoder(
    "hailo-nms",
    "Hailo on-chip NMS (HAILO_NMS_BY_CLASS, float32): per class a count, then y_min, x_min, y_max, x_max, score",
    "1 flat output: per class [count, count x (y_min, x_min, y_max, x_max, score)], boxes 0..1",
    _matches_hailo_nms,
    decode_hailo_nms,
    # Hailo Model Zoo YOLO builds: RGB, letterboxed, normalisation compiled into the .hef (uint8 input)
    {"color": "RGB", "resize": "letterbox", "anchor": "center", "pad_value": 114},
    detectable=False,
)
