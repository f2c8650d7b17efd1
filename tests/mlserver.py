"""Seldon's MLServer, a second real Open Inference Protocol (KServe v2) server beside Triton, for the remote engine's
tests: `mlserver start` in an environment of its own (made once per machine from the package registry, about 35 s),
serving a model through our custom runtime (tests/mlserver_runtime/onnx_detector.py: ONNX Runtime) on free loopback
ports, HTTP and gRPC; stopped by its process group id. MLServer offers none of Triton's extensions: no model config,
statistics, shared memory or binary tensors.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server import free_ports
from tests.v2_server import V2Process

RUNTIME = Path(__file__).resolve().parent / "mlserver_runtime"
PACKAGES = ["mlserver==1.7.1", "onnxruntime>=1.17"]
V2_TYPES = {"tensor(float)": "FP32", "tensor(uint8)": "UINT8", "tensor(int64)": "INT64"}


def environment() -> Path:
    return Path(os.environ.get("EDGE_MLSERVER_VENV", Path.home() / ".cache" / "edge-inference" / "mlserver-venv"))


def _held() -> str:
    return json.dumps({"python": sys.version, "packages": PACKAGES})


def require_mlserver() -> Path:
    """The environment's `mlserver` command, made where missing or made for other packages; a skip where the
    package registry cannot be reached to make it."""
    folder = environment()
    command, held = folder / "bin" / "mlserver", folder / "edge-held.json"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / "mlserver-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one maker at a time (test workers)
        if command.is_file() and held.is_file() and held.read_text() == _held():
            return command
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
        made = subprocess.run(
            [str(folder / "bin" / "python"), "-m", "pip", "install", "-q", *PACKAGES], capture_output=True, text=True
        )
        if made.returncode != 0:
            pytest.skip(f"MLServer could not be installed here: {made.stderr.strip().splitlines()[-1:]}")
        held.write_text(_held())
    return command


def _tensors(args: list) -> list[dict]:
    return [{"name": a.name, "datatype": V2_TYPES[a.type], "shape": list(a.shape)} for a in args]


class MLServer:
    def __init__(self, folder: Path, models: dict[str, Path]) -> None:
        self.folder, self.models = folder, models
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        self.process = V2Process("MLServer", folder / "mlserver.log", self.http_port, list(models))

    def http(self, model: str) -> str:
        return f"triton://127.0.0.1:{self.http_port}/{model}"

    def grpc(self, model: str) -> str:
        return f"triton+grpc://127.0.0.1:{self.grpc_port}/{model}"

    def _write_repository(self) -> None:
        import onnxruntime as ort

        for name, path in self.models.items():
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            settings = {
                "name": name,
                "implementation": "onnx_detector.OnnxDetector",
                "parameters": {"uri": str(path)},
                "inputs": _tensors(session.get_inputs()),
                "outputs": _tensors(session.get_outputs()),
            }
            (self.folder / name).mkdir(parents=True, exist_ok=True)
            (self.folder / name / "model-settings.json").write_text(json.dumps(settings))
        ports = {"http_port": self.http_port, "grpc_port": self.grpc_port, "metrics_port": self.metrics_port}
        server = {"host": "127.0.0.1", "parallel_workers": 0, **ports}
        (self.folder / "settings.json").write_text(json.dumps(server))

    def start(self) -> MLServer:
        command = require_mlserver()
        self._write_repository()
        self.process.start([str(command), "start", str(self.folder)], {**os.environ, "PYTHONPATH": str(RUNTIME)})
        return self

    def stop(self) -> None:
        self.process.stop()
