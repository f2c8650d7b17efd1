"""Small things several test modules need."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np


def run_edge(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real `edge` command line in a child process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "edge_inference", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def write_onnx_model(path: Path, input_shape: list[int], output_shape: list[int]) -> Path:
    """A real, loadable ONNX graph with an arbitrary output layout (a reshape of the input's mean)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    size = int(np.prod(output_shape))
    nodes = [
        helper.make_node("ReduceMean", ["images"], ["m"], keepdims=0),
        helper.make_node("Expand", ["m", "size"], ["flat"]),
        helper.make_node("Reshape", ["flat", "shape"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes,
        "layout",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, input_shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, output_shape)],
        initializer=[
            numpy_helper.from_array(np.array([size], np.int64), "size"),
            numpy_helper.from_array(np.array(output_shape, np.int64), "shape"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def wedge_after_warmup(backend: Any, unblock: threading.Event) -> None:
    """The real engine hangs in its run call after the warm-up one, until `unblock` is set: a wedged USB accelerator,
    which cannot be made here."""
    run, calls = backend.run, []

    def hanging_run(tensor: np.ndarray) -> Any:
        calls.append(1)
        if len(calls) > 1:
            unblock.wait(120)
        return run(tensor)

    backend.run = hanging_run


def install_engine_plugin(site: Path, key: str, source: str) -> Path:
    """An engine installed the way a plugin distribution is: a module `<key>_engine` with `ENGINE`, and its entry
    point, in `site` (put it on sys.path or PYTHONPATH)."""
    module = f"{key}_engine"
    dist = site / f"{module}-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / f"{module}.py").write_text(source)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {key}-engine\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[edge_inference.engines]\n{key} = {module}:ENGINE\n")
    return site


def provider_starts_here(provider: str, model: Path) -> bool:
    """Whether ONNX Runtime really runs a session on `provider` on this machine (a GPU build, its libraries and the
    device all present), asked of the runtime itself with the libraries loaded as the engine loads them."""
    import onnxruntime as ort

    from edge_inference.backends.cuda_libraries import missing_cuda_libraries

    if provider not in ort.get_available_providers() or missing_cuda_libraries():
        return False
    try:
        session = ort.InferenceSession(str(model), providers=[provider, "CPUExecutionProvider"], enable_fallback=0)
    except Exception:  # whatever the provider raises, it does not start
        return False
    return bool(session.get_providers()[0] == provider)


def write_clip(source: Path, path: Path, frames: int) -> Path:
    """The first `frames` frames of a video, as an MJPG AVI any OpenCV reads back."""
    import cv2

    capture, writer = cv2.VideoCapture(str(source)), None
    try:
        for _ in range(frames):
            ok, frame = capture.read()
            assert ok, f"{source} has fewer than {frames} frames"
            if writer is None:
                writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"MJPG"), 10, frame.shape[1::-1])
            writer.write(frame)
    finally:
        capture.release()
        if writer is not None:
            writer.release()
    return path
