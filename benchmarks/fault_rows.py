"""What every row of the fault matrix shares (`faults.py` runs them; `engine_faults.py`, `server_faults.py`,
`door_faults.py` and `soak.py` add their cases): the service in a child process, a probe of its answer times while a
case runs, and a row with the RSS before and after."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from benchmarks.common import pct
from tests.server import Server

MIB = 2**20


class Served(Server):
    """`edge serve` in a child process, as a user runs it (tests/server.py), with what the matrix watches."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None, token: str | None = None) -> None:
        handle, log_name = tempfile.mkstemp(prefix="edge-faults-", suffix=".log")
        os.close(handle)
        super().__init__(args, Path(log_name), env, token)
        self.client.timeout = httpx.Timeout(30)
        self.ps = psutil.Process(self.process.pid)

    def wait(self, condition: Callable[[], bool], timeout: float = 120) -> float:
        start = time.monotonic()
        while not condition():
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"timed out; server log: {self.log[-2000:]}")
            time.sleep(0.02)
        return time.monotonic() - start

    def answers(self, path: str, status: int = 200) -> bool:
        try:
            return self.client.get(path).status_code == status
        except httpx.TransportError:
            return False

    def stream(self, stream_id: str = "main") -> dict:
        return next(s for s in self.client.get("/api/v1/streams").json() if s["id"] == stream_id)

    def frames(self, stream_id: str = "main") -> int:
        return int(self.client.get("/api/v1/stats").json()["streams"][stream_id]["frames_processed"])

    def rss_mib(self) -> float:
        return self.ps.memory_info().rss / MIB

    def fds(self) -> int:
        return self.ps.num_fds()


class Probe:
    """`GET /api/v1/streams` every 20 ms on its own connection, for the answer times while a case runs."""

    def __init__(self, base: str, headers: dict[str, str] | None = None) -> None:
        self.base, self.headers = base, headers or {}
        self.times: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=60, headers=self.headers) as client:
            while not self._stop.is_set():
                t0 = time.perf_counter()
                try:
                    ok = client.get("/api/v1/streams").status_code == 200
                except httpx.TransportError:
                    ok = False
                self.times.append((time.perf_counter() - t0) * 1e3)
                self.failures += not ok
                self._stop.wait(0.02)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def summary(self) -> str:
        fails = f", {self.failures} failed" if self.failures else ""
        return f"{pct(self.times, 95):.0f} (max {max(self.times, default=0):.0f}{fails})"


@dataclass
class Row:
    case: str
    answer: str
    p95_ms: str
    rss: str
    lost: str


def measured(server: Served, case: str, action: Callable[[], tuple[str, str]]) -> Row:
    rss_before = server.rss_mib()
    t0 = time.monotonic()
    with Probe(server.base, dict(server.client.headers)) as probe:
        answer, lost = action()
        while len(probe.times) < 5:  # a case over before the first poll: a few answers from right after it
            time.sleep(0.01)
    print(f"  {case}: {answer} ({time.monotonic() - t0:.1f} s)", file=sys.stderr, flush=True)
    return Row(case, answer, probe.summary, f"{rss_before:.0f} -> {server.rss_mib():.0f}", lost)
