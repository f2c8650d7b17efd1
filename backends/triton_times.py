"""Where a remote frame's time goes: the network, the server's queue, the model's compute.

Triton does not put a request's own times in its response; its statistics extension keeps cumulative figures per
model (success, queue, compute_input/infer/output: count and nanoseconds per request; executions, for the batch
size). So the split is over the requests of the last few seconds: the client's round trips, against the server's
queue and compute over the same span (every client's requests for that model, other boxes' included: on a server
shared by many, its queue is theirs too). The network share is what the round trip spent outside the server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

POLL_S = 2.0  # the statistics read this often, on a thread started by the first request to end after that


def _stat(stats: dict[str, Any], name: str) -> tuple[int, int]:
    """(count, ns) of one of the model's inference statistics; gRPC's JSON writes int64 as strings, omits zeros."""
    entry = (stats.get("inference_stats") or {}).get(name) or {}
    return int(entry.get("count", 0) or 0), int(entry.get("ns", 0) or 0)


def totals(stats: dict[str, Any]) -> dict[str, int]:
    """The cumulative figures the split is made of."""
    found = {
        "executions": int(stats.get("execution_count", 0) or 0),
        "inferences": int(stats.get("inference_count", 0) or 0),
    }
    for name in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        found[f"{name}_count"], found[f"{name}_ns"] = _stat(stats, name)
    return found


def batch_sizes(stats: dict[str, Any]) -> dict[int, int]:
    """Executions by batch size, as the server formed them (its dynamic batcher's work)."""
    found = {}
    for entry in stats.get("batch_stats") or []:
        count = int(((entry.get("compute_infer") or {}).get("count", 0)) or 0)
        if count:
            found[int(entry["batch_size"])] = count
    return found


@dataclass
class ServerTimes:
    round_trips_ms: float = 0.0
    requests: int = 0
    last: dict[str, float] | None = None  # the latest split
    _previous: dict[str, int] | None = None
    _trips_at_previous: tuple[float, int] = (0.0, 0)
    _next_poll: float = 0.0
    _polling: bool = False  # the statistics are being read
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _wake: threading.Event = field(default_factory=threading.Event)
    _reader: threading.Thread | None = None  # reads the statistics when woken: one thread (and HTTP connection)
    _closed: bool = False

    @contextmanager
    def request(self) -> Iterator[None]:
        started = time.perf_counter()
        yield
        took = (time.perf_counter() - started) * 1e3
        with self._lock:
            self.round_trips_ms += took
            self.requests += 1

    def poll(self, server: Any) -> None:
        """Read the server's statistics when POLL_S has passed, on a thread of its own: a frame's lane never waits
        on the statistics request (a slow server would add its time to the frame's). One reading at a time."""
        now = time.monotonic()
        with self._lock:
            if now < self._next_poll or self._polling:
                return
            self._polling, self._next_poll = True, now + POLL_S
            if self._reader is None:
                self._reader = threading.Thread(target=self._reading, args=(server,), name="triton-statistics")
                self._reader.daemon = True
                self._reader.start()
        self._wake.set()

    def _reading(self, server: Any) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._closed:
                return
            self._read(server)

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    def _read(self, server: Any) -> None:
        try:
            current = totals(server.statistics())
        except Exception:  # noqa: BLE001 - a server without the extension (or gone a moment): no split
            current = None
        with self._lock:
            self._polling = False
            if current is None:
                return
            trips = (self.round_trips_ms, self.requests)
            if self._previous is not None:
                done = (trips[0] - self._trips_at_previous[0], trips[1] - self._trips_at_previous[1])
                self.last = split(self._previous, current, *done)
            self._previous, self._trips_at_previous = current, trips


def split(before: dict[str, int], after: dict[str, int], trips_ms: float, trips: int) -> dict[str, float] | None:
    """Per request over the span between two readings: the round trip, the server's queue and compute, the rest
    (network and the server's front end), and the batch size the server ran; None when nothing ran in it."""
    done = after["success_count"] - before["success_count"]
    if done <= 0 or trips <= 0:
        return None

    def per_request(name: str) -> float:
        return (after[f"{name}_ns"] - before[f"{name}_ns"]) / done / 1e6

    round_trip = trips_ms / trips
    compute = per_request("compute_input") + per_request("compute_infer") + per_request("compute_output")
    executions = after["executions"] - before["executions"]
    batch = (after["inferences"] - before["inferences"]) / executions if executions > 0 else 1.0
    return {
        "round_trip_ms": round(round_trip, 3),
        "network_ms": round(max(0.0, round_trip - per_request("success")), 3),
        "queue_ms": round(per_request("queue"), 3),
        "compute_ms": round(compute, 3),
        "batch_size": round(batch, 2),
    }
