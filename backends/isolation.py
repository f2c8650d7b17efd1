"""Which engines run in a process of their own (backends/isolated.py) and which in the service's.

`process` for the engines whose native code can end a process: the accelerators' (Edge TPU, Hailo, RKNN, TensorRT
and CUDA, OpenVINO on a GPU or NPU) and plugins, whose code nobody here has read. The CPU engines (ONNX Runtime,
OpenVINO and LiteRT on the CPU) are mature and run in-process by default: `benchmarks/isolation.py` measured the
split's cost on them (BENCHMARKS.md, issue 57) and `isolation: process` asks for it anyway.
"""

from __future__ import annotations

from pathlib import Path

from edge_inference.backends.base import Backend, BackendOptions
from edge_inference.backends.engine import get_engine

BUILT_IN_PACKAGE = "edge_inference.backends."


def _is_plugin(engine: str) -> bool:
    load = get_engine(engine).load
    return not getattr(load, "__module__", "").startswith(BUILT_IN_PACKAGE)


def runs_isolated(engine: str, options: BackendOptions) -> bool:
    """Whether this engine, on this device, loads in a child process."""
    if options.isolation != "auto":
        return options.isolation == "process"
    if get_engine(engine).serves is not None:  # a client of a server: the network runs elsewhere
        return False
    declared = get_engine(engine)
    if declared.chip is not None or _is_plugin(engine):  # an accelerator's runtime, always
        return True
    return declared.off_cpu(options.device)  # a GPU's or NPU's driver under a CPU engine


def open_engine(engine: str, path: Path, options: BackendOptions) -> Backend:
    """The model loaded in a child process or in this one, as `runs_isolated` says."""
    from edge_inference.backends import open_backend
    from edge_inference.backends.isolated import load_isolated

    if runs_isolated(engine, options):
        return load_isolated(engine, path, options, host=chip_owner(engine, options))
    return open_backend(engine, path, options)


def chip_owner(engine: str, options: BackendOptions) -> str | None:
    """Models on one accelerator share one process: a Hailo is given to the first VDevice that opens it, and an Edge
    TPU or an NPU to one process (HailoRT's vdevice.cpp: "not enough free devices" for a second). The chip, not the
    device setting's text, keys it: `auto` and `usb:0` on a box with one Coral are one owner. Other engines' models
    get a process each."""
    chip = get_engine(engine).chip
    return f"{engine}|{chip(options.device)}" if chip is not None else None
