"""Output decoders, chosen by name or recognised from the model's output layout."""

from __future__ import annotations

from collections.abc import Sequence

from edge_inference.models.decoders.base import DecodeContext, Decoder
from edge_inference.models.decoders.hailo_nms import HAILO_NMS
from edge_inference.models.decoders.nanodet import NANODET
from edge_inference.models.decoders.ssd import SSD
from edge_inference.models.decoders.yolo import END2END, YOLOV5, YOLOV8, YOLOX
from edge_inference.models.decoders.yolo_split import YOLOV8_SPLIT
from edge_inference.models.errors import ModelError

# Order matters only for layouts that could fit two entries; none of these do for real input sizes.
DECODERS: dict[str, Decoder] = {
    d.name: d for d in (YOLOX, YOLOV5, YOLOV8, END2END, SSD, NANODET, HAILO_NMS, YOLOV8_SPLIT)
}


class UnknownLayoutError(ModelError):
    pass


def get_decoder(name: str) -> Decoder:
    try:
        return DECODERS[name]
    except KeyError:
        raise UnknownLayoutError(f"unknown decoder {name!r}; choose one of: {', '.join(DECODERS)}") from None


def detect_decoder(
    output_shapes: Sequence[tuple[int, ...]],
    output_names: Sequence[str],
    width: int,
    height: int,
    strides: tuple[int, ...] = (8, 16, 32),
) -> Decoder:
    for decoder in DECODERS.values():
        if decoder.detectable and decoder.matches(output_shapes, width, height, strides):
            return decoder
    described = ", ".join(f"{n} {list(s)}" for n, s in zip(output_names, output_shapes, strict=True))
    known = "; ".join(f"{d.name}: {d.layout}" for d in DECODERS.values())
    raise UnknownLayoutError(
        f"unrecognised output layout for a {width}x{height} input: {described}. "
        f"Name the decoder with --decoder NAME or 'decoder: NAME' in the model's sidecar .yaml. Known layouts: {known}"
    )


__all__ = ["DECODERS", "DecodeContext", "Decoder", "UnknownLayoutError", "detect_decoder", "get_decoder"]
