"""Inference engines behind one interface; each engine module declares itself (see backends/engine.py)."""

from __future__ import annotations

from pathlib import Path

from edge_inference.backends.base import (
    Backend,
    BackendError,
    BackendOptions,
    Description,
    PixelSteps,
    Quantization,
    TensorInfo,
    brief,
)
from edge_inference.backends.engine import Engine, engines, get_engine


def open_backend(key: str, path: Path, options: BackendOptions) -> Backend:
    return get_engine(key).load(path, options)


def describe_model(key: str, path: Path, options: BackendOptions) -> Description | None:
    """What the model declares, read without preparing it to run, for an engine that is to take the pre-processing;
    None for the others (and where reading fails: loading reports it)."""
    describe = get_engine(key).describe
    if describe is None:
        return None
    try:
        return describe(path, options)
    except Exception:  # noqa: BLE001 - loading it says what is wrong, in the engine's own words
        return None


def engine_keys() -> list[str]:
    return list(engines())


__all__ = [
    "Backend",
    "BackendError",
    "BackendOptions",
    "Description",
    "Engine",
    "PixelSteps",
    "Quantization",
    "TensorInfo",
    "brief",
    "describe_model",
    "engine_keys",
    "engines",
    "get_engine",
    "open_backend",
]
