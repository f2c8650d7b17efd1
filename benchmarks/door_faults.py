"""The fault matrix's rows for the service's own doors (issue 78), on either HTTP parser: clients that pipeline
without reading, send headers without end, frame a request two ways, or guess the token on many connections. Each
row: what the clients got, the RSS before, at its peak and after, and a bystander's longest `GET /health/live`.

    python -m benchmarks.faults --only doors-httptools doors-h11
"""

from __future__ import annotations

import contextlib
import socket
import tempfile
import threading
import time
from pathlib import Path

import httpx

from benchmarks.common import VTEST
from benchmarks.fault_rows import Row, Served, measured

TOKEN = "door-faults-token-1234"
PIPELINED = b"GET /health/live HTTP/1.1\r\nHost: localhost\r\n\r\n" * 100_000
HUGE_HEADER = b"GET /health/live HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"a" * 2**20 + b"\r\n\r\n"
MANY_HEADERS = b"GET /health/live HTTP/1.1\r\nHost: localhost\r\n" + b"".join(
    b"X-H%d: v\r\n" % n for n in range(20_000)
)
AMBIGUOUS = [
    b"GET /health/live HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n\r\n",
    b"POST /api/v1/detect HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"0\r\n\r\n",
    b"GET http://evil.example/health/live HTTP/1.1\r\nHost: localhost\r\n\r\n",
]


def _send(port: int, payload: bytes, read: bool) -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(30)
        said = b""
        with contextlib.suppress(OSError):
            sock.sendall(payload)
            while read and (chunk := sock.recv(65536)):
                said += chunk
        return said


class Watch:
    """The service's peak RSS, and a bystander's longest `GET /health/live`, while a case runs."""

    def __init__(self, server: Served) -> None:
        self.server, self.peak, self.longest_ms, self.polled = server, server.rss_mib(), 0.0, False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.server.base, timeout=60) as client:
            while not self._stop.is_set():
                t0 = time.perf_counter()
                with contextlib.suppress(httpx.TransportError):
                    client.get("/health/live")
                self.longest_ms, self.polled = max(self.longest_ms, (time.perf_counter() - t0) * 1e3), True
                self.peak = max(self.peak, self.server.rss_mib())
                self._stop.wait(0.1)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _case(server: Served, name: str, clients: int, payload: bytes, read: bool) -> Row:
    before = server.rss_mib()
    answers: list[bytes] = []

    def action() -> tuple[str, str]:
        with Watch(server) as watch:
            threads = [
                threading.Thread(target=lambda: answers.append(_send(server.port, payload, read)))
                for _ in range(clients)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
        time.sleep(5)  # what is kept after they left
        after = server.rss_mib()
        statuses = sorted({a.split(b"\r\n", 1)[0].decode(errors="replace") for a in answers if a}) or ["closed"]
        return (
            f"{', '.join(statuses)}; RSS {before:.0f} -> peak {watch.peak:.0f} ({watch.peak / before:.2f}x) -> "
            f"{after:.0f} MiB",
            f"a bystander's longest /health/live {watch.longest_ms:.0f} ms" if watch.polled else "over before a poll",
        )

    return measured(server, name, action)


def _guessing(server: Served, parser: str, connections: int = 20, seconds: float = 10.0) -> Row:
    """Wrong tokens from one address on many connections at once: slowed per client address, not per request."""
    before = server.rss_mib()
    counts: list[int] = []

    def guess(connection: int) -> None:
        ends, sent = time.monotonic() + seconds, 0
        with httpx.Client(base_url=server.base, timeout=60) as client:
            while time.monotonic() < ends:
                client.get("/api/v1/streams", headers={"Authorization": f"Bearer guess-{connection}-{sent:05d}"})
                sent += 1
        counts.append(sent)

    def action() -> tuple[str, str]:
        with Watch(server) as watch:
            t0 = time.monotonic()
            threads = [threading.Thread(target=guess, args=(n,)) for n in range(connections)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(seconds + 120)
            took = time.monotonic() - t0
        after = server.rss_mib()
        return (
            f"{sum(counts) / took:.1f} guesses a second in all ({sum(counts)} in {took:.0f} s); RSS {before:.0f} -> "
            f"peak {watch.peak:.0f} ({watch.peak / before:.2f}x) -> {after:.0f} MiB",
            f"a bystander's longest /health/live {watch.longest_ms:.0f} ms" if watch.polled else "over before a poll",
        )

    return measured(server, f"{connections} connections guessing the token for {seconds:.0f} s ({parser})", action)


def _settled(server: Served, within_mib: float = 2.0, seconds: float = 5.0, at_most_s: float = 180.0) -> None:
    """Waits until the service's RSS moves less than `within_mib` over `seconds` (at most `at_most_s`)."""
    ends, last = time.monotonic() + at_most_s, server.rss_mib()
    while time.monotonic() < ends:
        time.sleep(seconds)
        now = server.rss_mib()
        if abs(now - last) < within_mib:
            return
        last = now


def door_cases(parser: str) -> list[Row]:
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "streams.yaml"
        config.write_text(f"server:\n  http: {parser}\nstreams:\n  - id: main\n    source: {VTEST}\n    loop: true\n")
        server = Served(["--config", str(config)], token=TOKEN)
        try:
            server.wait(lambda: server.answers("/health/ready"), 180)
            server.wait(lambda: server.frames() > 30, 240)
            _settled(server)  # the engine's own memory first: its growth is not a client's
            rows = [
                _case(server, f"10 connections pipelining 100,000 requests unread ({parser})", 10, PIPELINED, False),
                _case(server, f"20 connections each sending a 1 MiB header ({parser})", 20, HUGE_HEADER, True),
                _case(server, f"20 connections each sending 20,000 headers ({parser})", 20, MANY_HEADERS, True),
            ]
            rows += [
                _case(server, f"ambiguous framing {n + 1} of 3 ({parser})", 1, r, True) for n, r in enumerate(AMBIGUOUS)
            ]
            rows.append(_guessing(server, parser))
            return rows
        finally:
            server.stop()
