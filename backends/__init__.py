"""Inference engines behind one interface, registered by key and imported only when used."""

from __future__ import annotations

import importlib
from pathlib import Path

from backends.base import Backend, BackendError, BackendOptions, Quantization, TensorInfo

# key -> module with `load(path, options) -> Backend`
BACKEND_MODULES: dict[str, str] = {
    "onnx": "backends.onnxruntime_backend",
    "tflite": "backends.tflite_backend",
}
# File extension -> the backend that reads it when none is named.
DEFAULT_BACKEND_FOR_SUFFIX = {".onnx": "onnx", ".tflite": "tflite", ".xml": "openvino"}


def open_backend(key: str, path: Path, options: BackendOptions) -> Backend:
    if key not in BACKEND_MODULES:
        raise BackendError(f"unknown backend {key!r}; choose one of: {', '.join(BACKEND_MODULES)}")
    module = importlib.import_module(BACKEND_MODULES[key])
    backend: Backend = module.load(path, options)
    return backend


def backend_for_file(path: Path) -> str:
    key = DEFAULT_BACKEND_FOR_SUFFIX.get(path.suffix.lower())
    if key is None:
        raise BackendError(
            f"cannot tell which engine reads {path.name}; use a .onnx, .tflite or OpenVINO .xml file, "
            "or name one with --backend"
        )
    return key


__all__ = [
    "BACKEND_MODULES",
    "Backend",
    "BackendError",
    "BackendOptions",
    "Quantization",
    "TensorInfo",
    "backend_for_file",
    "open_backend",
]
