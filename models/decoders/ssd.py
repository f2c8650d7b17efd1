"""SSD with TensorFlow Lite's detection post-process: boxes, classes, scores, count (NMS already done)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edge_inference.models.decoders.base import DecodeContext, Decoder, to_detections
from edge_inference.models.detection import Detection


def _split(outputs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Find boxes, classes, scores and count by shape; classes and scores by their values."""
    flat = [np.asarray(o).reshape(-1) if o.ndim <= 2 else o.reshape(-1, 4) for o in outputs]
    boxes = next(f for f in flat if f.ndim == 2)
    count_arr = next(f for f in flat if f.ndim == 1 and f.size == 1)
    pair = [f for f in flat if f.ndim == 1 and f.size == boxes.shape[0] and f is not count_arr]
    classes, scores = pair[0], pair[1]
    # The usual order is classes then scores; scores never exceed 1 and classes are whole numbers.
    if np.any(scores > 1.0) or (np.any(classes % 1 != 0) and not np.any(scores % 1 != 0)):
        classes, scores = scores, classes
    count = int(min(max(count_arr[0], 0), boxes.shape[0]))
    return boxes, classes, scores, count


def decode_ssd(outputs: Sequence[np.ndarray], ctx: DecodeContext) -> list[Detection]:
    boxes, classes, scores, count = _split(outputs)
    rows = np.flatnonzero(scores[:count] > ctx.conf_threshold)
    pre = ctx.spec.preprocessing
    # ymin, xmin, ymax, xmax in 0..1 of the model input -> x1, y1, x2, y2 in input pixels
    xyxy = boxes[rows][:, [1, 0, 3, 2]].astype(np.float32)
    xyxy[:, 0::2] *= pre.width
    xyxy[:, 1::2] *= pre.height
    return to_detections(xyxy, scores[rows], classes[rows].astype(np.int64), ctx, nms=False)


def _matches_ssd(shapes: Sequence[tuple[int, ...]], w: int, h: int, strides: tuple[int, ...]) -> bool:
    """Boxes [1, K, 4], classes and scores [1, K], count [1]; engines may report K (or all dims) as dynamic (-1)."""
    if len(shapes) != 4:
        return False
    ranks = sorted(len(s) for s in shapes)
    if ranks != [1, 2, 2, 3]:
        return False
    boxes = next(s for s in shapes if len(s) == 3)
    pair = [s for s in shapes if len(s) == 2]
    known = {s[-1] for s in pair if s[-1] > 0} | ({boxes[1]} if boxes[1] > 0 else set())
    return boxes[-1] in (4, -1) and len(known) <= 1


SSD = Decoder(
    "ssd",
    "SSD with TFLite_Detection_PostProcess (boxes ymin,xmin,ymax,xmax 0..1; classes; scores; count)",
    "4 outputs: [1, K, 4], [1, K], [1, K], [1]",
    _matches_ssd,
    decode_ssd,
    {"color": "RGB", "resize": "stretch", "mean": (127.5, 127.5, 127.5), "std": (127.5, 127.5, 127.5)},
    default_labels="coco90",
)
