"""Letterbox / stretch geometry, and mapping boxes from model-input pixels back to the original image."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge_inference.models.spec import Preprocessing


@dataclass(frozen=True, slots=True)
class ImageTransform:
    """original pixel * (scale_x, scale_y) + (pad_x, pad_y) = model-input pixel."""

    scale_x: float
    scale_y: float
    pad_x: int
    pad_y: int
    resized_width: int
    resized_height: int
    input_width: int
    input_height: int
    original_width: int
    original_height: int

    @classmethod
    def fit(cls, original_width: int, original_height: int, pre: Preprocessing) -> ImageTransform:
        if pre.resize == "stretch":
            return cls(
                pre.width / original_width,
                pre.height / original_height,
                0,
                0,
                pre.width,
                pre.height,
                pre.width,
                pre.height,
                original_width,
                original_height,
            )
        scale = min(pre.width / original_width, pre.height / original_height)
        resized_w = max(1, min(pre.width, round(original_width * scale)))
        resized_h = max(1, min(pre.height, round(original_height * scale)))
        pad_x = pad_y = 0
        if pre.anchor == "center":
            pad_x, pad_y = (pre.width - resized_w) // 2, (pre.height - resized_h) // 2
        return cls(
            scale,
            scale,
            pad_x,
            pad_y,
            resized_w,
            resized_h,
            pre.width,
            pre.height,
            original_width,
            original_height,
        )

    def boxes_to_original(self, boxes: np.ndarray) -> np.ndarray:
        """Map (N, 4) x1,y1,x2,y2 boxes in model-input pixels to clipped original-image pixels, in place."""
        boxes[:, 0::2] -= self.pad_x
        boxes[:, 1::2] -= self.pad_y
        boxes[:, 0::2] /= self.scale_x
        boxes[:, 1::2] /= self.scale_y
        np.clip(boxes[:, 0::2], 0, self.original_width, out=boxes[:, 0::2])
        np.clip(boxes[:, 1::2], 0, self.original_height, out=boxes[:, 1::2])
        return boxes
