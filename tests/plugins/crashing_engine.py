"""A plugin engine that dies the ways native engines die, on its Nth inference: for the tests of engines in
processes of their own (backends/isolated.py). ONNX Runtime underneath, so it detects for real until then.

    engine_options: {crashy: {how: abort | segfault | hang | oom, after: 40}}

abort: `os.abort()` (libedgetpu's LOG(FATAL) on a failed USB transfer); segfault: a NULL pointer read through ctypes;
hang: a call that never returns (a driver waiting on a device that is gone); hang-loading: the same while loading;
oom: memory taken until the kernel's OOM killer ends the process; raise: every inference from then on raises (a
device error that sticks to the process, as a CUDA context does after an illegal address). `after` counts inferences
in this process (the warm-up's included), so an engine started again dies again after as many.
"""

import ctypes
import dataclasses
import os
import threading
from typing import Literal

from pydantic import Field

from edge_inference.backends.engine import Engine
from edge_inference.backends.onnxruntime_backend import load as load_onnx
from edge_inference.backends.options import EngineOptions

CHUNK = 32 << 20


class CrashOptions(EngineOptions):
    how: Literal["abort", "segfault", "hang", "hang-loading", "oom", "raise", "none"] = Field(
        default="abort", description="how it dies"
    )
    after: int = Field(default=40, ge=1, description="inferences before it dies")


def die(how):
    if how == "raise":  # a device error that sticks to the process: every inference from now on fails
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    if how == "abort":
        os.abort()
    if how == "segfault":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    if how == "hang":
        threading.Event().wait()
    if how == "oom":
        hoard = []
        while True:
            hoard.append(bytes(CHUNK).replace(b"\0", b"\1"))  # pages written, so they count


def probe():
    return ENGINE.status(True, engine="crashy 0.1", devices=["crashy0  dies on purpose"])


def load(path, options):
    settings = CrashOptions.model_validate(dict(options.engine_options))
    if settings.how == "hang-loading":  # a driver that never answers while it opens the device
        threading.Event().wait()
    backend = load_onnx(path, dataclasses.replace(options, device="cpu", engine_options={}))
    backend = dataclasses.replace(backend, key="crashy", engine="crashy 0.1", device="crashy0")
    inner, count, lock = backend.run, [0], threading.Lock()

    def run(tensor):
        with lock:
            count[0] += 1
            dying = count[0] >= settings.after and settings.how != "none"
        if dying:
            die(settings.how)
        return inner(tensor)

    backend.run = run
    return backend


def rank(path):
    return None  # never chosen by auto: only where a stream names it


ENGINE = Engine(
    key="crashy",
    formats=(".onnx",),
    install="(a test engine)",
    probe=probe,
    load=load,
    rank=rank,
    options=CrashOptions,
)
