"""Cost of tracking, zones, lines and events (issues 10 and 23), measured in one run.

    python -m benchmarks.events

(a) per-frame time and CPU of tracking + 2 zones + 2 lines + the event bookkeeping, with 20 people walking
    (synthetic boxes with jitter, 1000 frames, the first 50 not counted); target <= 1 ms median. Beside it, on the
    same boxes, the libraries our tracker, zones and lines reproduce (trackers' ByteTrack, supervision's zones
    and lines): the ratio of the two is the speed-up.
(b) pipeline fps on vtest.avi in file mode (unpaced), yolox-nano on ONNX Runtime CPU: with tracking, a zone, a line,
    events stored in SQLite and published to a real Mosquitto / without any of it, runs alternated; target >= 0.95
(c) peak RSS of a service process running (b) with all of it / without, each in a fresh child; target <= +30 MiB
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from pydantic import SecretStr

from benchmarks.common import MODELS, REPO, VTEST, cpu_seconds, machine, pct, peak_rss_mib
from edge_inference.edge.config import (
    EventsConfig,
    LineConfig,
    ServiceConfig,
    TrackingConfig,
    ZoneConfig,
)
from edge_inference.edge.events.builder import EventBuilder
from edge_inference.edge.runtime.streams import StreamManager
from edge_inference.edge.settings import Settings
from edge_inference.edge.stream.tracking import StreamTracker
from edge_inference.models.detection import BoxXYXY, Detection
from tests.mosquitto import Broker

ZONES = [
    ZoneConfig(name="left", polygon=[(0.0, 0.3), (0.4, 0.3), (0.4, 1.0), (0.0, 1.0)]),
    ZoneConfig(name="right", polygon=[(0.6, 0.3), (1.0, 0.3), (1.0, 1.0), (0.6, 1.0)]),
]
LINES = [
    LineConfig(name="middle", start=(0.5, 0.0), end=(0.5, 1.0)),
    LineConfig(name="across", start=(0.0, 0.6), end=(1.0, 0.6)),
]


def walkers(frames: int, people: int = 20, width: int = 1280, height: int = 720) -> list[list[Detection]]:
    """People walking back and forth across the frame at different heights and speeds, boxes jittering."""
    rng = np.random.default_rng(7)
    x = rng.uniform(0, width, people)
    y = rng.uniform(height * 0.35, height * 0.95, people)
    speed = rng.uniform(2, 8, people) * rng.choice([-1, 1], people)
    out = []
    for _ in range(frames):
        x = x + speed
        speed = np.where((x < 20) | (x > width - 20), -speed, speed)
        jitter = rng.normal(0, 1.5, (people, 4))
        out.append(
            [
                Detection(0, "person", float(rng.uniform(0.55, 0.95)),
                          BoxXYXY(x[i] - 20 + jitter[i, 0], y[i] - 100 + jitter[i, 1],
                                  x[i] + 20 + jitter[i, 2], y[i] + jitter[i, 3]))
                for i in range(people)
            ]
        )  # fmt: skip
    return out


def per_frame_cost(frames: int = 1000, warm: int = 50) -> tuple[list[float], list[float], float]:
    """Ours: per-frame ms of tracking + zones + lines, of the event bookkeeping, and CPU ms per frame of both."""
    tracker = StreamTracker(TrackingConfig(labels=["person"]), ZONES, LINES)
    builder = EventBuilder("bench", EventsConfig(labels=["person"], min_frames=3))
    image = np.zeros((720, 1280, 3), np.uint8)
    analyse_ms, events_ms, cpu_start = [], [], 0.0
    for index, detections in enumerate(walkers(frames)):
        if index == warm:
            cpu_start = cpu_seconds()
        now = 1000.0 + index / 30
        t0 = time.perf_counter()
        analysis = tracker.analyse(detections, 1280, 720, now)
        t1 = time.perf_counter()
        builder.observe(analysis.detections, analysis.zones, analysis.lines, image, now)
        t2 = time.perf_counter()
        if index >= warm:
            analyse_ms.append((t1 - t0) * 1e3)
            events_ms.append((t2 - t1) * 1e3)
    return analyse_ms, events_ms, (cpu_seconds() - cpu_start) * 1e3 / (frames - warm)


def library_cost(frames: int = 1000, warm: int = 50) -> tuple[list[float], float]:
    """trackers' ByteTrack with supervision's 2 zones and 2 lines, as tracking.py used them, on the same boxes:
    per-frame ms, and CPU ms per frame from the kernel."""
    import supervision as sv
    from trackers import ByteTrackTracker

    tracker = ByteTrackTracker(
        lost_track_buffer=60, frame_rate=30, track_activation_threshold=0.4, minimum_consecutive_frames=2,
        high_conf_det_threshold=0.5,
    )  # fmt: skip
    feet = (sv.Position.BOTTOM_CENTER,)
    size = np.array([1280, 720])
    zones = [sv.PolygonZone(np.round(np.array(z.polygon) * size).astype(int), feet) for z in ZONES]
    lines = [
        sv.LineZone(sv.Point(*np.round(np.array(li.start) * size)), sv.Point(*np.round(np.array(li.end) * size)),
                    triggering_anchors=feet)
        for li in LINES
    ]  # fmt: skip
    times, cpu_start = [], 0.0
    for index, detections in enumerate(walkers(frames)):
        if index == warm:
            cpu_start = cpu_seconds()
        found = sv.Detections(
            xyxy=np.array([[d.box.x1, d.box.y1, d.box.x2, d.box.y2] for d in detections], np.float32),
            confidence=np.array([d.score for d in detections], np.float32),
            class_id=np.zeros(len(detections), np.int64),
        )
        t0 = time.perf_counter()
        tracked = tracker.update(found)
        tracked = tracked[tracked.tracker_id >= 0]
        for zone in zones:
            zone.trigger(tracked)
        for line in lines:
            line.trigger(tracked)
        if index >= warm:
            times.append((time.perf_counter() - t0) * 1e3)
    return times, (cpu_seconds() - cpu_start) * 1e3 / (frames - warm)


def service_config(events: bool, data_dir: Path, broker: Broker) -> tuple[ServiceConfig, Settings]:
    stream: dict[str, object] = {
        "id": "bench",
        "source": str(VTEST),
        "model": str(MODELS / "onnx/yolox_nano.onnx"),
        "backend": "onnx",
        "conf": 0.35,
        "pace": False,
    }
    config: dict[str, object] = {"streams": [stream]}
    if events:
        stream |= {
            "tracking": {"labels": ["person"]},
            "zones": [{"name": "crossing", "polygon": [[0.45, 0.4], [0.8, 0.4], [0.8, 0.62], [0.45, 0.62]]}],
            "lines": [{"name": "path", "start": [0.28, 0.25], "end": [0.28, 0.7]}],
            "events": {"labels": ["person"]},
        }
        config["mqtt"] = {"device_id": "bench", "stats_interval_s": 5}
    settings = Settings(data_dir=data_dir, mqtt_url=SecretStr(broker.url) if events else None)
    return ServiceConfig.model_validate(config), settings


def pipeline_fps(events: bool, data_dir: Path, broker: Broker) -> tuple[float, float]:
    """(fps, the process's CPU ms per frame) from the 10th result to the last. `process_time` is read at every result
    (a microsecond; `cpu_seconds`, which walks /proc for live children, took 5% of the run); the broker is not in it."""
    config, settings = service_config(events, data_dir, broker)
    manager = StreamManager(config, settings)
    marks: list[tuple[float, float]] = []
    pipeline = manager.pipelines["bench"]
    pipeline.add_listener(lambda _: marks.append((time.perf_counter(), time.process_time())))
    manager.start()
    deadline = time.monotonic() + 600
    while pipeline.state != "ended" and time.monotonic() < deadline:
        time.sleep(0.05)
    manager.stop()
    warm = 10
    frames = len(marks) - 1 - warm
    (first, first_cpu), (last, last_cpu) = marks[warm], marks[-1]
    return frames / (last - first), (last_cpu - first_cpu) * 1e3 / frames


def report_per_frame() -> None:
    analyse_ms, events_ms, cpu_ms = per_frame_cost()
    total = [a + e for a, e in zip(analyse_ms, events_ms, strict=True)]
    median = statistics.median(total)
    verdict = "met" if median <= 1.0 else "missed"
    print(
        f"(a) 20 people, tracker + 2 zones + 2 lines: median {statistics.median(analyse_ms):.2f} ms, "
        f"p95 {pct(analyse_ms, 95):.2f} ms; events: median {statistics.median(events_ms):.3f} ms; "
        f"all: median {median:.2f} ms, p95 {pct(total, 95):.2f} ms, CPU {cpu_ms:.2f} ms/frame "
        f"(target <= 1 ms median: {verdict})"
    )
    library, library_cpu = library_cost()
    ours = statistics.median(analyse_ms)
    print(
        f"    the libraries on the same boxes (trackers' ByteTrack + supervision's zones and lines): median "
        f"{statistics.median(library):.2f} ms, CPU {library_cpu:.2f} ms/frame -> ours / theirs: time "
        f"{ours / statistics.median(library):.3f}, CPU with events {cpu_ms / library_cpu:.3f}"
    )


@contextlib.contextmanager
def running_broker() -> Iterator[tuple[Path, Broker]]:
    """A scratch folder and a real Mosquitto for the service's events, stopped at the end."""
    with tempfile.TemporaryDirectory() as folder:
        broker = Broker(Path(folder) / "broker")
        broker.start()
        try:
            yield Path(folder), broker
        finally:
            broker.stop()


def report_pipeline(rounds: int) -> None:
    off, on = [], []
    with running_broker() as (folder, broker):
        for round_ in range(rounds):
            off.append(pipeline_fps(False, folder / f"data-off-{round_}", broker))
            on.append(pipeline_fps(True, folder / f"data-on-{round_}", broker))
    ratio = statistics.median(f for f, _ in on) / statistics.median(f for f, _ in off)
    cpu_ratio = statistics.median(c for _, c in on) / statistics.median(c for _, c in off)
    verdict = "met" if ratio >= 0.95 else "missed"
    print(
        f"(b) pipeline fps, file mode: without events {[round(f, 1) for f, _ in off]}, with tracking + zone + line + "
        f"events + MQTT {[round(f, 1) for f, _ in on]} -> ratio {ratio:.2f} (target >= 0.95: {verdict})\n"
        f"    CPU ms per frame: without {[round(c, 2) for _, c in off]}, with {[round(c, 2) for _, c in on]} -> "
        f"with / without {cpu_ratio:.3f}"
    )


def child_peak_rss(events: bool) -> float:
    """Peak RSS (MiB) of a fresh process serving vtest.avi as in (b)."""
    command = [sys.executable, "-m", "benchmarks.events", "--child", "on" if events else "off"]
    out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPO, timeout=1200).stdout
    return float(out.strip().splitlines()[-1])


def report_memory(rounds: int) -> None:
    off, on = [], []
    for _ in range(rounds):
        off.append(child_peak_rss(False))
        on.append(child_peak_rss(True))
    extra = statistics.median(on) - statistics.median(off)
    verdict = "met" if extra <= 30 else "missed"
    print(
        f"(c) peak RSS of the service, vtest.avi: without events {[round(v) for v in off]} MiB, with tracking + zone "
        f"+ line + events + MQTT {[round(v) for v in on]} MiB -> +{extra:.0f} MiB (target <= +30 MiB: {verdict})"
    )


def child(events: bool) -> int:
    with running_broker() as (folder, broker):
        pipeline_fps(events, folder / "data", broker)
    print(f"{peak_rss_mib():.1f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", choices=["on", "off"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child == "on")
    print(machine())
    report_per_frame()
    report_pipeline(args.rounds)
    report_memory(args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
