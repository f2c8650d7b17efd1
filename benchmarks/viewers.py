"""What viewers cost the service: CPU per frame (from the kernel) and RSS with N dashboard or event clients against
none, measured side by side in one run on a real `edge serve` (vtest.avi at its 10 fps, yolox-nano on ONNX Runtime).

    python -m benchmarks.viewers [--clients 50] [--seconds 20] [--rounds 2] [--http httptools,h11]

Each client is a plain socket reading its SSE stream as fast as it comes (`/api/v1/live`: every stream's detections,
thumbnails and changes, as the dashboard's grid; `/api/v1/streams/main/events`: one stream's detections). Phases
alternate (none, live, none, events, ...) so a busy moment of the machine falls on each alike. Goals (issue 62):
50 live clients <= 1.10x and 50 event clients <= 1.05x the CPU per frame of none; RSS with 50 live <= 1.15x of none.
`--http` names the HTTP parsers (`server.http`) to measure, one server each, in turn in this run.
"""

from __future__ import annotations

import argparse
import selectors
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import psutil

from benchmarks.common import MODELS, VTEST, machine
from tests.server import Server

MODEL = str(MODELS / "onnx/yolox_nano.onnx")
PATHS = {"live": "/api/v1/live", "events": "/api/v1/streams/main/events"}


class Readers:
    """`count` clients on `path`, each read on one selector thread until stopped."""

    def __init__(self, port: int, path: str, count: int) -> None:
        self.socks = []
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n".encode())
            sock.setblocking(False)
            self.socks.append(sock)
        self.received = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        selector = selectors.DefaultSelector()
        for sock in self.socks:
            selector.register(sock, selectors.EVENT_READ)
        while not self._stop.is_set():
            for key, _ in selector.select(0.2):
                try:
                    self.received += len(key.fileobj.recv(1 << 16))  # type: ignore[union-attr]
                except BlockingIOError:
                    continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for sock in self.socks:
            sock.close()


def loop_cpu(process: psutil.Process) -> float:
    """CPU seconds of the service's main thread, where uvicorn's event loop serves every client."""
    return next(t.user_time + t.system_time for t in process.threads() if t.id == process.pid)


def phase(server: Server, process: psutil.Process, seconds: float) -> tuple[float, float, float]:
    """(CPU ms per frame processed, RSS MiB at the end, the event loop's CPU ms per frame) over `seconds`."""

    def frames() -> int:
        return int(server.client.get("/api/v1/stats").json()["streams"]["main"]["frames_processed"])

    cpu0, loop0, f0 = sum(process.cpu_times()[:2]), loop_cpu(process), frames()
    time.sleep(seconds)
    cpu1, loop1, f1 = sum(process.cpu_times()[:2]), loop_cpu(process), frames()
    count = max(1, f1 - f0)
    return (cpu1 - cpu0) * 1e3 / count, process.memory_info().rss / 2**20, (loop1 - loop0) * 1e3 / count


def measure(http: str, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "serve.yaml"
        config.write_text(
            f"server: {{http: {http}}}\nstreams:\n  - {{id: main, source: {VTEST}, loop: true, model: {MODEL}, "
            "backend: onnx, device: cpu, threads: 1}\n"
        )
        server = Server(["--config", str(config)], Path(folder) / "serve.log", env={"EDGE_AUTO_MEASURE": "0"})
        try:
            server.wait_until("/health/ready", timeout=180)
            server.wait_for_frames("main", 50, timeout=120)
            process = psutil.Process(server.process.pid)
            figures: dict[str, list[tuple[float, float, float]]] = {"none": [], "live": [], "events": []}
            for _ in range(args.rounds):
                for kind in ("live", "events"):
                    figures["none"].append(phase(server, process, args.seconds))
                    readers = Readers(server.port, PATHS[kind], args.clients)
                    time.sleep(2)  # connected and streaming before the phase counts
                    try:
                        figures[kind].append(phase(server, process, args.seconds))
                    finally:
                        readers.close()
                    received = readers.received / 2**20
                    print(f"  {http}, {kind}: {args.clients} clients took {received:.1f} MiB", flush=True)
        finally:
            server.stop()
    report(http, args.clients, figures)


def report(http: str, clients: int, figures: dict[str, list[tuple[float, float, float]]]) -> None:
    none_cpu = statistics.median(cpu for cpu, _, _ in figures["none"])
    none_rss = statistics.median(rss for _, rss, _ in figures["none"])
    none_loop = statistics.median(loop for _, _, loop in figures["none"])
    print(f"server.http: {http}")
    print(f"no client: {none_cpu:.1f} ms CPU per frame, {none_rss:.0f} MiB RSS ({len(figures['none'])} phases)")
    for kind, goal in (("live", 1.10), ("events", 1.05)):
        cpu = statistics.median(c for c, _, _ in figures[kind])
        rss = max(r for _, r, _ in figures[kind])
        ratios = ", ".join(f"{c / none_cpu:.2f}" for c, _, _ in figures[kind])
        met = "met" if cpu / none_cpu <= goal else "missed"
        print(
            f"{clients} {kind} clients: {cpu:.1f} ms CPU per frame = {cpu / none_cpu:.2f}x none "
            f"(phases {ratios}; goal <= {goal:.2f}: {met}); RSS {rss:.0f} MiB = {rss / none_rss:.2f}x none"
        )
        # the event loop's own CPU moves far less with the machine than the inference's that fills the ratio
        per_client = (statistics.median(loop for _, _, loop in figures[kind]) - none_loop) * 1e3 / clients
        print(f"    the event loop: {per_client:.1f} us of CPU per client per frame (none: {none_loop:.2f} ms a frame)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--http", default="auto", help="comma-separated: auto, httptools, h11")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    for http in args.http.split(","):
        measure(http, args)


if __name__ == "__main__":
    main()
