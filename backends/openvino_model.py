"""OpenVINO models as the pipeline feeds them, for the engine and for `edge models convert` (which quantises the
model the engine would run): nothing here loads or compiles."""

from __future__ import annotations

import contextlib
from typing import Any


def batch_of_one(model: Any) -> Any:
    """A batch the exporter left open (torch.onnx's `dynamic_axes={"images": {0: "batch"}}`) set to 1, the frames the
    pipeline feeds: left open, OpenVINO could not tell the outputs' sizes either ([1, -1, 85]), no decoder matched
    them, and a model ONNX Runtime ran was refused here. An image size left open stays so (the spec names none), and
    so does a batch the graph cannot be reshaped to."""
    if len(model.inputs) != 1:
        return model
    shape = model.inputs[0].get_partial_shape()
    if shape.rank.is_static and shape.rank.get_length() == 4 and shape[0].is_dynamic:
        shape[0] = 1
        with contextlib.suppress(RuntimeError):
            model.reshape({model.inputs[0]: shape})
    return model
