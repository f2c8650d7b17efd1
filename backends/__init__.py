"""Inference engines behind one interface, registered by key and imported only when used."""

from __future__ import annotations

import importlib
from pathlib import Path

from backends.base import Backend, BackendError, BackendOptions, Quantization, TensorInfo

# key -> module with `load(path, options) -> Backend`
BACKEND_MODULES: dict[str, str] = {
    "onnx": "backends.onnxruntime_backend",
    "tflite": "backends.tflite_backend",
    "openvino": "backends.openvino_backend",
    "edgetpu": "backends.edgetpu_backend",
}


def open_backend(key: str, path: Path, options: BackendOptions) -> Backend:
    if key not in BACKEND_MODULES:
        raise BackendError(f"unknown backend {key!r}; choose one of: {', '.join(BACKEND_MODULES)}")
    module = importlib.import_module(BACKEND_MODULES[key])
    backend: Backend = module.load(path, options)
    return backend


__all__ = [
    "BACKEND_MODULES",
    "Backend",
    "BackendError",
    "BackendOptions",
    "Quantization",
    "TensorInfo",
    "open_backend",
]
