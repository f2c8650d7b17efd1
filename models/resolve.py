"""Build a ModelSpec from what the model file says, the decoder family's conventions, a sidecar and flags."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from edge_inference.models.decoders import Decoder, detect_decoder, get_decoder
from edge_inference.models.errors import ModelError
from edge_inference.models.labels import COCO80, COCO90, load_labels
from edge_inference.models.overrides import SpecOverrides
from edge_inference.models.spec import ModelSpec, Preprocessing

DEFAULT_SIZE = 640


@dataclass(frozen=True)
class ModelIO:
    """The plain facts a backend reports about a model, with nothing engine-specific left."""

    input_shape: tuple[int, ...]
    output_shapes: Sequence[tuple[int, ...]]
    output_names: Sequence[str]
    metadata: dict[str, str]

    @classmethod
    def of(cls, model: Any) -> ModelIO:
        """What a loaded engine or a model's description (backends' `Backend`, `Description`) says: its first input,
        its outputs and its metadata."""
        return cls(
            input_shape=model.inputs[0].shape,
            output_shapes=[o.shape for o in model.outputs],
            output_names=[o.name for o in model.outputs],
            metadata=model.metadata,
        )


def _input_geometry(shape: tuple[int, ...]) -> tuple[str, int, int]:
    if len(shape) != 4:
        raise ModelError(f"expected a 4-D image input (NCHW or NHWC), the model's input has shape {list(shape)}")
    if shape[1] == 3:
        return "NCHW", shape[3], shape[2]
    if shape[3] == 3:
        return "NHWC", shape[2], shape[1]
    raise ModelError(
        f"cannot tell the channel axis of input shape {list(shape)}; expected 3 channels first or last. "
        "Set 'layout:' in the model's sidecar .yaml"
    )


def _metadata_facts(metadata: dict[str, str]) -> dict[str, Any]:
    """What a file's metadata says of the model: an exporter's own keys, then what the engine reports."""
    return {**_ultralytics(metadata), **_engine_output_format(metadata)}


def _ultralytics(metadata: dict[str, str]) -> dict[str, Any]:
    """Ultralytics exports embed imgsz, class names and whether the head is end-to-end."""
    found: dict[str, Any] = {}
    try:
        if "imgsz" in metadata:
            height, width = ast.literal_eval(metadata["imgsz"])
            found["size"] = (int(width), int(height))
        if "names" in metadata:
            names = ast.literal_eval(metadata["names"])
            found["labels"] = {int(k): str(v) for k, v in names.items()}
    except (ValueError, SyntaxError, TypeError):
        pass  # malformed metadata is ignored: shapes and flags still describe the model
    if metadata.get("end2end", "").lower() == "true":
        found["decoder"] = "yolo-end2end"
    return found


def _engine_output_format(metadata: dict[str, str]) -> dict[str, Any]:
    """What an engine says of its output format (HailoRT: the .hef's NMS layer); engines name formats, not decoders,
    so the decoder for each format is chosen here."""
    if metadata.get("output_format") == "hailo_nms_by_class":
        return {"decoder": "hailo-nms"}
    return {}


def resolve_spec(name: str, io: ModelIO, overrides: SpecOverrides) -> ModelSpec:
    sources: dict[str, str] = {}
    meta = _metadata_facts(io.metadata)
    layout, width, height = _geometry(io, overrides, meta, sources)
    strides = overrides.strides or (8, 16, 32)
    decoder = _decoder(io, overrides, meta, (width, height), strides, sources)
    settings: dict[str, Any] = {"width": width, "height": height, "layout": layout, **decoder.preprocessing}
    for key in decoder.preprocessing:
        sources[key] = f"{decoder.name} default"
    for f in fields(Preprocessing):
        value = getattr(overrides, f.name, None)
        if value is not None:
            settings[f.name] = tuple(value) if isinstance(value, list) else value
            sources[f.name] = "override"
    return ModelSpec(
        name=name,
        decoder=decoder.name,
        preprocessing=Preprocessing(**settings),
        labels=_labels(overrides, meta, decoder, sources),
        boxes_normalized=overrides.boxes_normalized,
        strides=strides,
        reg_max=overrides.reg_max or 7,
        sources=sources,
    )


def _geometry(
    io: ModelIO, overrides: SpecOverrides, meta: dict[str, Any], sources: dict[str, str]
) -> tuple[str, int, int]:
    """(layout, width, height) from the input shape, the layout flag, metadata for dynamic inputs, size flags."""
    if overrides.layout is None:
        layout, width, height = _input_geometry(io.input_shape)
    else:
        layout, (width, height) = overrides.layout, _size_for_layout(io.input_shape, overrides.layout)
    if width <= 0 or height <= 0:  # dynamic input: metadata, flags, or the usual default
        width, height = meta.get("size", (DEFAULT_SIZE, DEFAULT_SIZE))
        sources["size"] = "metadata" if "size" in meta else f"default {DEFAULT_SIZE} (dynamic input)"
    return layout, overrides.width or width, overrides.height or height


def _decoder(
    io: ModelIO,
    overrides: SpecOverrides,
    meta: dict[str, Any],
    size: tuple[int, int],
    strides: tuple[int, ...],
    sources: dict[str, str],
) -> Decoder:
    """The decoder named by a flag or the metadata (checked against the outputs), else the one the layout shows."""
    width, height = size
    decoder_name = overrides.decoder or meta.get("decoder")
    if not decoder_name:
        sources["decoder"] = "output layout"
        return detect_decoder(io.output_shapes, io.output_names, width, height, strides)
    decoder = get_decoder(decoder_name)
    sources["decoder"] = "override" if overrides.decoder else "metadata"
    if not decoder.matches(io.output_shapes, width, height, strides):
        described = ", ".join(f"{n} {list(s)}" for n, s in zip(io.output_names, io.output_shapes, strict=True))
        raise ModelError(
            f"decoder {decoder.name!r} expects {decoder.layout} for a {width}x{height} input, "
            f"but this model outputs {described}; check --decoder, the input size and the strides"
        )
    return decoder


def _labels(
    overrides: SpecOverrides, meta: dict[str, Any], decoder: Decoder, sources: dict[str, str]
) -> dict[int, str]:
    if overrides.labels:
        sources["labels"] = overrides.labels
        return load_labels(Path(overrides.labels).expanduser())
    if "labels" in meta:
        sources["labels"] = "metadata"
        return dict(meta["labels"])
    sources["labels"] = decoder.default_labels
    return dict(COCO90) if decoder.default_labels == "coco90" else dict(enumerate(COCO80))


def _size_for_layout(shape: tuple[int, ...], layout: str) -> tuple[int, int]:
    if len(shape) != 4:
        raise ModelError(f"expected a 4-D image input, the model's input has shape {list(shape)}")
    return (shape[3], shape[2]) if layout == "NCHW" else (shape[2], shape[1])
