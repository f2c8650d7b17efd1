"""Unattended for a while: does the service's memory, file descriptors or threads grow?

`edge serve` runs two looped pedestrian streams (one with tracking, a zone, a line, stored events and MQTT to a real
mosquitto; one plain) as fast as they go, while clients come and go the whole time: SSE, MJPEG and WebSocket viewers
that read a little and leave, snapshots, uploads, stats, metrics, the stored events and their SSE. Every
`--every` seconds the service's RSS, descriptors and threads are sampled. After the warm-up the RSS slope is fitted
(least squares) and extrapolated to a day: that is the figure a Pi left alone cares about.

    PYTHONPATH=. python -m benchmarks.soak --minutes 30
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import yaml
from websockets.sync.client import connect

from benchmarks.common import SHARED, VTEST, machine
from benchmarks.fault_rows import Served
from tests.mosquitto import Broker, Subscriber

PHOTO = SHARED / "media" / "kite_and_cold.jpg"
TARGET_MIB_PER_DAY = 24.0  # a 1 GiB Pi's unit (MemoryMax=1G) lasts a month of headroom at this rate


def soak_config(work: Path) -> Path:
    config = yaml.safe_load((Path(__file__).parent.parent / "deploy/events.example.yaml").read_text())
    walkway = config["streams"][0] | {"source": str(VTEST), "pace": False, "mode": "file", "threads": 1}
    walkway["events"]["end_after_s"] = 1
    plain = {"id": "plain", "source": str(VTEST), "loop": True, "pace": False, "mode": "file", "threads": 1}
    config["streams"] = [walkway, plain]
    config["mqtt"] |= {"device_id": "soak"}
    config["server"] |= {"max_clients_per_stream": 16}
    path = work / "soak.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _sse(client: httpx.Client, path: str, lines: int) -> None:
    with client.stream("GET", path, timeout=30) as response:
        for _, _line in zip(range(lines), response.iter_lines(), strict=False):
            pass


def _mjpeg(client: httpx.Client, path: str, size: int) -> None:
    with client.stream("GET", path, timeout=30) as response:
        got = 0
        for chunk in response.iter_bytes():
            got += len(chunk)
            if got > size:
                break


def _websocket(base: str, stream: str, messages: int) -> None:
    with connect(f"ws://{base.split('//', 1)[1]}/api/v1/streams/{stream}/ws", open_timeout=30) as ws:
        for _ in range(messages):
            ws.recv(timeout=30)


def client_churn(base: str, stop: threading.Event, failures: list[str]) -> None:
    """Clients as a house has them: each comes, takes a little, goes; one after another, for the whole run."""
    photo = PHOTO.read_bytes()
    actions = [
        lambda c: _sse(c, "/api/v1/streams/walkway/events", 60),
        lambda c: _mjpeg(c, "/api/v1/streams/plain/video.mjpg", 400_000),
        lambda c: _websocket(base, "walkway", 20),
        lambda c: c.get("/api/v1/streams/walkway/snapshot.jpg").raise_for_status(),
        lambda c: c.post("/api/v1/detect", content=photo).raise_for_status(),
        lambda c: c.get("/metrics").raise_for_status(),
        lambda c: c.get("/api/v1/stats").raise_for_status(),
        lambda c: c.get("/api/v1/events", params={"limit": 50}).raise_for_status(),
        lambda c: _sse(c, "/api/v1/events/stream", 6),
        lambda c: _sse(c, "/api/v1/live", 40),
    ]
    with httpx.Client(base_url=base, timeout=30) as client:
        for action in itertools.cycle(actions):
            if stop.is_set():
                return
            try:
                action(client)
            except Exception as exc:  # noqa: BLE001 - counted and shown, the run goes on
                failures.append(f"{type(exc).__name__}: {exc}"[:160])
            stop.wait(0.2)


def slope_per_day(samples: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares slope of (seconds, MiB) in MiB a day, and its standard error: RSS moves a few MiB from sample
    to sample (frames and JPEGs in flight), so a short run's slope says little without it."""
    times, values = zip(*samples, strict=True)
    fit = statistics.linear_regression(times, values)
    residuals = [v - (fit.slope * t + fit.intercept) for t, v in samples]
    mean_time = statistics.fmean(times)
    spread = sum((t - mean_time) ** 2 for t in times)
    error = math.sqrt(sum(r * r for r in residuals) / (len(samples) - 2) / spread) if spread else math.inf
    return fit.slope * 86400, error * 86400


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--warmup-minutes", type=float, default=5)
    parser.add_argument("--every", type=float, default=15)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="edge-soak-"))
    broker = Broker(work / "broker")
    broker.start()
    subscriber = Subscriber(broker, ["edge-inference/soak/#"], client_id="soak-consumer")
    server = Served(["--config", str(soak_config(work))], {"EDGE_MQTT_URL": broker.url, "EDGE_DATA_DIR": str(work)})
    stop, failures = threading.Event(), []  # type: ignore[var-annotated]
    samples: list[tuple[float, float, int, int, int]] = []
    try:
        server.wait(lambda: server.answers("/health/ready"), 300)
        churn = threading.Thread(target=client_churn, args=(server.base, stop, failures), daemon=True)
        churn.start()
        start = time.monotonic()
        print(f"# soak {args.minutes:g} min, warm-up {args.warmup_minutes:g} min; {machine()}", flush=True)
        print("minute   RSS MiB  fds  threads  frames(walkway+plain)  events", flush=True)
        while (elapsed := time.monotonic() - start) < args.minutes * 60:
            stats = server.client.get("/api/v1/stats").json()
            frames = sum(s["frames_processed"] for s in stats["streams"].values())
            recorded = stats["events"]["recorded"] if stats.get("events") else 0
            samples.append((elapsed, server.rss_mib(), server.fds(), server.ps.num_threads(), frames))
            print(
                f"{elapsed / 60:6.1f}  {samples[-1][1]:8.1f}  {samples[-1][2]:3d}  {samples[-1][3]:7d}  "
                f"{frames:21d}  {recorded}",
                flush=True,
            )
            time.sleep(args.every)
    finally:
        stop.set()
        server.stop()
        subscriber.close()
        broker.stop()
    report(samples, args.warmup_minutes * 60, failures, len(subscriber.received()))


def report(samples: list[tuple[float, float, int, int, int]], warmup_s: float, failures: list[str], mqtt: int) -> None:
    settled = [s for s in samples if s[0] >= warmup_s]
    if len(settled) < 3:
        print("too few samples after the warm-up: run longer")
        return
    per_day, error = slope_per_day([(s[0], s[1]) for s in settled])
    first, last = settled[0], settled[-1]
    status = "met" if per_day <= TARGET_MIB_PER_DAY else "MISSED"
    quarter = max(1, len(settled) // 4)
    early, late = (statistics.fmean(s[1] for s in part) for part in (settled[:quarter], settled[-quarter:]))
    print(
        f"RSS after warm-up {first[1]:.1f} -> {last[1]:.1f} MiB (peak {max(s[1] for s in settled):.1f}; mean of the "
        f"first quarter {early:.1f}, of the last {late:.1f}), slope {per_day:+.1f} MiB/day, +-{2 * error:.1f} "
        f"(2 standard errors) (target <= {TARGET_MIB_PER_DAY:g}: {status})"
    )
    print(
        f"descriptors {first[2]} -> {last[2]}, threads {first[3]} -> {last[3]}, "
        f"frames {last[4]}, MQTT messages received {mqtt}"
    )
    print(f"client failures: {len(failures)}" + "".join(f"\n  {f}" for f in failures[:10]))


if __name__ == "__main__":
    main()
