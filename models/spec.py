"""What a detector model needs around it: input geometry, pixel normalisation, decoder and labels."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Layout = Literal["NCHW", "NHWC"]
ColorOrder = Literal["RGB", "BGR"]
ResizeMode = Literal["letterbox", "stretch"]
PadAnchor = Literal["center", "top-left"]


@dataclass(frozen=True)
class Preprocessing:
    """How an image becomes the model's input tensor.

    Pixel values become ``(pixel - mean) / std`` per channel, in the model's channel order;
    ``mean=0, std=255`` is the common "/255", ``mean=0, std=1`` feeds raw 0..255.
    """

    width: int
    height: int
    layout: Layout = "NCHW"
    color: ColorOrder = "RGB"
    resize: ResizeMode = "letterbox"
    anchor: PadAnchor = "center"
    pad_value: int = 114
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (255.0, 255.0, 255.0)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    decoder: str
    preprocessing: Preprocessing
    labels: dict[int, str] = field(default_factory=dict)
    # None: decide from the values (Ultralytics exports differ between ONNX and TFLite).
    boxes_normalized: bool | None = None
    strides: tuple[int, ...] = (8, 16, 32)
    # NanoDet/GFL: distance bins per side minus one.
    reg_max: int = 7
    # Where each setting came from, for `edge models describe` and error messages.
    sources: dict[str, str] = field(default_factory=dict)
