"""A real Triton Inference Server for the tests and benchmarks: `deploy/triton/pytriton_server.py` in an
environment of its own (NVIDIA's `nvidia-pytriton`, which bundles `tritonserver`), on free loopback ports, serving a
repository `edge models export-triton` wrote; stopped by its process group id.

The environment is made once per machine (about 450 MB; a minute from the package registry) from Debian's
/usr/bin/python3.11: PyTriton's Python stub fails on pyenv's 3.11.7.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.server import free_ports

ROOT = Path(__file__).resolve().parents[1]
SERVER_SCRIPT = ROOT / "deploy" / "triton" / "pytriton_server.py"
SYSTEM_PYTHON = Path("/usr/bin/python3.11")
PACKAGES = ["nvidia-pytriton==0.7.0", "onnxruntime>=1.17", "numpy<2"]
READY_WITHIN_S = 120.0


def environment() -> Path:
    return Path(os.environ.get("EDGE_PYTRITON_VENV", Path.home() / ".cache" / "edge-inference" / "pytriton-venv"))


def _held() -> str:
    """What the environment holds, as it was asked for: a change of either makes it anew."""
    return json.dumps({"python": str(SYSTEM_PYTHON), "packages": PACKAGES})


def _works(python: Path) -> bool:
    check = [str(python), "-c", "import pytriton.triton, onnxruntime, tritonclient.grpc"]
    held = python.parent.parent / "edge-held.json"
    if not (held.is_file() and held.read_text() == _held()):
        return False
    return python.is_file() and subprocess.run(check, capture_output=True).returncode == 0


def require_pytriton() -> Path:
    """The environment's python, made where missing or made for other packages; a skip only where the wheel cannot
    install (not x86-64 Linux)."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip("nvidia-pytriton's tritonserver is built for x86-64 Linux only")
    folder = environment()
    python = folder / "bin" / "python"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / "pytriton-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one maker at a time (test workers, a benchmark)
        if _works(python):
            return python
        if not SYSTEM_PYTHON.is_file():
            raise RuntimeError("PyTriton's stub needs Debian's python3.11: apt-get install python3.11-venv")
        subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", "--clear", str(folder)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PACKAGES], check=True)
        (folder / "edge-held.json").write_text(_held())
        if not _works(python):
            raise RuntimeError(f"the PyTriton environment {folder} does not import pytriton after installing it")
    return python


class TritonServer:
    """`models` are the repository's model names; ready once each answers ready."""

    def __init__(
        self,
        repository: Path,
        models: list[str],
        log: Path,
        access_token: str | None = None,
        grpc_tls: tuple[Path, Path] | None = None,  # (certificate, key): gRPC over TLS
    ) -> None:
        self.repository, self.models, self.log = repository, models, log
        self.access_token, self.grpc_tls = access_token, grpc_tls
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        self.process: subprocess.Popen[bytes] | None = None

    def http(self, model: str) -> str:
        return f"triton://127.0.0.1:{self.http_port}/{model}"

    def grpc(self, model: str) -> str:
        return f"triton+grpc://127.0.0.1:{self.grpc_port}/{model}"

    def start(self) -> TritonServer:
        python = require_pytriton()
        command = [str(python), str(SERVER_SCRIPT), "--repository", str(self.repository)]
        command += ["--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port)]
        command += ["--metrics-port", str(self.metrics_port)]
        if self.access_token:
            command += ["--access-token", self.access_token]
        if self.grpc_tls:
            command += ["--grpc-cert", str(self.grpc_tls[0]), "--grpc-key", str(self.grpc_tls[1])]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + READY_WITHIN_S
        while not all(self._ready(m) for m in self.models):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Triton did not come up; its log: {self.log.read_text()[-2000:]}")
            time.sleep(0.3)
        return self

    def _ready(self, model: str) -> bool:
        url = f"http://127.0.0.1:{self.http_port}/v2/models/{model}/ready"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def kill(self) -> None:
        """Gone at once, as a crashed or unplugged server: the whole group (PyTriton, tritonserver, the stubs)."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):  # the group outlives its leader: its members too
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self.process = None

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(15)
        self.kill()


def export(folder: Path, model: str, name: str, max_batch_size: int = 8, pixels: bool = True) -> Path:
    """The repository entry `edge models export-triton` writes for a model file (`pixels`: its default input)."""
    from edge_inference.models.triton_repository import ExportOptions, export_repository

    options = ExportOptions(max_batch_size=max_batch_size, kind="KIND_CPU", pixels=pixels)
    export_repository(Path(model), folder, name, options)
    return folder
