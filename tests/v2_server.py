"""A KServe v2 (Open Inference Protocol) server in a process group of its own, as the tests start MLServer and
KServe's model server: started, waited for until each model answers ready over HTTP, stopped by its group id."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

READY_WITHIN_S = 120.0


def model_ready(http_port: int, model: str) -> bool:
    try:
        url = f"http://127.0.0.1:{http_port}/v2/models/{model}/ready"
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


class V2Process:
    def __init__(self, what: str, log: Path, http_port: int, models: list[str]) -> None:
        self.what, self.log, self.http_port, self.models = what, log, http_port, models
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, command: list[str], env: dict[str, str] | None = None) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + READY_WITHIN_S
        while not all(model_ready(self.http_port, model) for model in self.models):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.what} did not come up; its log: {self.log.read_text()[-2000:]}")
            time.sleep(0.3)

    def stop(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None
