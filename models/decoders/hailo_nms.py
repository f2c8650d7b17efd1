"""Hailo on-chip NMS (HAILO_NMS_BY_CLASS, NMS already done on the device), as the Hailo engine hands it on.

pyhailort returns, per image, one [n, 5] float32 array per class (y_min, x_min, y_max, x_max in 0..1 of the model
input, then the score); the engine stacks them into rows (1, N, 6) with the class id last, so nothing is packed into
HailoRT's flat buffer and unpacked again. The NMS thresholds are those compiled into the .hef: `--iou` does not
apply, and `--conf` can only raise the compiled score threshold.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edge_inference.models.decoders.base import DecodeContext, Decoder, to_detections
from edge_inference.models.detection import Detection
from edge_inference.models.errors import ModelError

ROW_FLOATS = 6


def decode_hailo_nms(outputs: Sequence[np.ndarray], ctx: DecodeContext) -> list[Detection]:
    rows = np.asarray(outputs[0], np.float32)
    if rows.ndim < 2 or rows.shape[-1] != ROW_FLOATS:
        raise ModelError(
            f"Hailo NMS output of shape {rows.shape}: expected rows of {ROW_FLOATS} (y_min, x_min, y_max, x_max, "
            "score, class id) from the hailo engine"
        )
    rows = rows.reshape(-1, ROW_FLOATS)
    rows = rows[rows[:, 4] > ctx.conf_threshold]
    pre = ctx.spec.preprocessing
    xyxy = rows[:, [1, 0, 3, 2]] * np.array([pre.width, pre.height, pre.width, pre.height], np.float32)
    return to_detections(xyxy, rows[:, 4], rows[:, 5].astype(np.int64), ctx, nms=False)


def _matches_hailo_nms(shapes: Sequence[tuple[int, ...]], w: int, h: int, strides: tuple[int, ...]) -> bool:
    """Rows of six; only chosen when the engine says the output is Hailo NMS (the shape alone says too little)."""
    return len(shapes) == 1 and shapes[0][-1:] == (ROW_FLOATS,)


HAILO_NMS = Decoder(
    "hailo-nms",
    "Hailo on-chip NMS (HAILO_NMS_BY_CLASS): boxes already kept by the chip",
    "1 output (1, N, 6): y_min, x_min, y_max, x_max (0..1), score, class id",
    _matches_hailo_nms,
    decode_hailo_nms,
    # Hailo Model Zoo YOLO builds: RGB, letterboxed, normalisation compiled into the .hef (uint8 input)
    {"color": "RGB", "resize": "letterbox", "anchor": "center", "pad_value": 114},
    detectable=False,
)
