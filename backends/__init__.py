"""Inference engines behind one interface; each engine module declares itself (see backends/engine.py)."""

from __future__ import annotations

from pathlib import Path

from edge_inference.backends.base import Backend, BackendError, BackendOptions, Quantization, TensorInfo
from edge_inference.backends.engine import Engine, engines, get_engine


def open_backend(key: str, path: Path, options: BackendOptions) -> Backend:
    return get_engine(key).load(path, options)


def engine_keys() -> list[str]:
    return list(engines())


__all__ = [
    "Backend",
    "BackendError",
    "BackendOptions",
    "Engine",
    "Quantization",
    "TensorInfo",
    "engine_keys",
    "engines",
    "get_engine",
    "open_backend",
]
