"""A real `edge serve` process on loopback, and small HTTP helpers for tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def sse_data(client: httpx.Client, path: str, kind: str, count: int, timeout: float = 30) -> list[dict]:
    """The JSON data of the first `count` Server-Sent Events of type `kind` on `path`."""
    found: list[dict] = []
    with client.stream("GET", path, timeout=timeout) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        event = None
        for line in response.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == kind:
                found.append(json.loads(line.split(":", 1)[1]))
                if len(found) == count:
                    break
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    def __init__(
        self,
        args: list[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        token: str | None = None,
        port: int | None = None,  # a restart on the port of the one before
        log_level: str = "info",
    ) -> None:
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = log_path.open("w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "edge_inference",
                "serve",
                *args,
                "--port",
                str(self.port),
                "--log-level",
                log_level,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {}), **({"EDGE_TOKEN": token} if token else {})},
        )
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=self.base, timeout=10, headers=headers)

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def wait_until(self, path: str, status: int = 200, timeout: float = 60) -> httpx.Response:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited with {self.process.returncode}:\n{self.log}")
            with contextlib.suppress(httpx.TransportError):
                response = self.client.get(path)
                if response.status_code == status:
                    return response
            time.sleep(0.05)
        raise AssertionError(f"{path} did not answer {status} within {timeout}s:\n{self.log}")

    def wait_for_frames(self, stream: str, count: int, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            figures = self.client.get("/api/v1/stats").json()["streams"][stream]
            if figures["frames_processed"] >= count:
                return figures
            time.sleep(0.1)
        raise AssertionError(f"stream {stream} processed fewer than {count} frames:\n{self.log}")

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


@contextlib.contextmanager
def running_server(
    args: list[str],
    log_path: Path,
    env: dict[str, str] | None = None,
    token: str | None = None,
    log_level: str = "info",
) -> Iterator[Server]:
    server = Server(args, log_path, env, token, log_level=log_level)
    try:
        yield server
    finally:
        server.stop()
