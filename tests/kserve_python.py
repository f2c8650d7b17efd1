"""KServe's own Python model server (pip `kserve`), a third real Open Inference Protocol server beside Triton and
MLServer: our runtime (tests/kserve_runtime/onnx_detector.py) in an environment of its own, made once per machine
from the package registry (about 45 s), on free loopback ports, HTTP and gRPC; stopped by its process group id."""

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

RUNTIME = Path(__file__).resolve().parent / "kserve_runtime" / "onnx_detector.py"
PACKAGES = ["kserve==0.21.0", "onnxruntime>=1.17"]


def environment() -> Path:
    return Path(os.environ.get("EDGE_KSERVE_VENV", Path.home() / ".cache" / "edge-inference" / "kserve-venv"))


def require_kserve() -> Path:
    """The environment's python, made where missing; a skip where the registry cannot be reached to make it."""
    folder = environment()
    python, held = folder / "bin" / "python", folder / "edge-held.json"
    wanted = json.dumps({"python": sys.version, "packages": PACKAGES})
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / "kserve-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.is_file() and held.is_file() and held.read_text() == wanted:
            return python
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
        made = subprocess.run([str(python), "-m", "pip", "install", "-q", *PACKAGES], capture_output=True, text=True)
        if made.returncode != 0:
            pytest.skip(f"KServe could not be installed here: {made.stderr.strip().splitlines()[-1:]}")
        held.write_text(wanted)
    return python


class KServeServer:
    def __init__(self, log: Path, name: str, model: Path) -> None:
        self.name, self.model = name, model
        self.http_port, self.grpc_port = free_ports(2)
        self.process = V2Process("KServe", log, self.http_port, [name])

    def http(self) -> str:
        return f"triton://127.0.0.1:{self.http_port}/{self.name}"

    def grpc(self) -> str:
        return f"triton+grpc://127.0.0.1:{self.grpc_port}/{self.name}"

    def start(self) -> KServeServer:
        command = [str(require_kserve()), str(RUNTIME), self.name, str(self.model)]
        self.process.start([*command, str(self.http_port), str(self.grpc_port)])
        return self

    def stop(self) -> None:
        self.process.stop()
