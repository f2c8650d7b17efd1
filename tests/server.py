"""A real `edge serve` process on loopback, and small HTTP helpers for tests."""

from __future__ import annotations

import contextlib
import json
import os
import re
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
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` different ports: each socket is held until all are bound, as the kernel may hand a port it has just
    been given back again (a Triton once got one port for HTTP and metrics and refused to start)."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


ANNOUNCED = re.compile(r"edge: serving on http://\S+:(\d+) ")  # printed once its socket is bound, not before


class Server:
    """`edge serve ARGS` in a process of its own. Without `port` it listens on a port the kernel picks when it binds
    (`--port 0`), read from its start-up line: a port found free here and handed over was sometimes taken by another
    worker's server first, whose answers the test then read as this one's."""

    def __init__(
        self,
        args: list[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        token: str | None = None,
        port: int | None = None,  # a restart on the port of the one before
        log_level: str = "info",
    ) -> None:
        self._port = port
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
                str(port or 0),
                "--log-level",
                log_level,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {}), **({"EDGE_TOKEN": token} if token else {})},
        )
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client: httpx.Client | None = None

    @property
    def port(self) -> int:
        """The port it listens on, once it has said so (it binds before it announces)."""
        deadline = time.monotonic() + 120
        while self._port is None:
            found = ANNOUNCED.search(self.log)
            if found:
                self._port = int(found.group(1))
            elif self.process.poll() is not None:
                raise AssertionError(f"server exited with {self.process.returncode} before listening:\n{self.log}")
            elif time.monotonic() > deadline:
                raise AssertionError(f"server said no port within 120 s:\n{self.log}")
            else:
                time.sleep(0.05)
        return self._port

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(base_url=self.base, timeout=10, headers=self._headers)
        return self._client

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
        if self._client is not None:
            self._client.close()
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
