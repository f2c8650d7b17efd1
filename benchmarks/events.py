"""Cost of tracking, zones, lines and events (issue 10), measured in one run.

    python -m benchmarks.events

(a) per-frame time of ByteTrack + 2 zones + 2 lines + the event bookkeeping, with 20 people walking (synthetic
    boxes with jitter, 1000 frames, the first 50 not counted); target <= 1 ms median
(b) pipeline fps on vtest.avi in file mode (unpaced), yolox-nano on ONNX Runtime CPU: with tracking, a zone, a line,
    events stored in SQLite and published to a real Mosquitto / without any of it, runs alternated; target >= 0.95
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from pydantic import SecretStr

from benchmarks.common import MODELS, VTEST, machine, pct
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


def per_frame_cost(frames: int = 1000, warm: int = 50) -> tuple[list[float], list[float]]:
    tracker = StreamTracker(TrackingConfig(labels=["person"]), ZONES, LINES, fps=30)
    builder = EventBuilder("bench", EventsConfig(labels=["person"], min_frames=3))
    image = np.zeros((720, 1280, 3), np.uint8)
    analyse_ms, events_ms = [], []
    for index, detections in enumerate(walkers(frames)):
        now = 1000.0 + index / 30
        t0 = time.perf_counter()
        analysis = tracker.analyse(detections, 1280, 720, now)
        t1 = time.perf_counter()
        builder.observe(analysis.detections, analysis.zones, analysis.lines, image, now)
        t2 = time.perf_counter()
        if index >= warm:
            analyse_ms.append((t1 - t0) * 1e3)
            events_ms.append((t2 - t1) * 1e3)
    return analyse_ms, events_ms


def bytetrack_only_cost(frames: int = 1000, warm: int = 50) -> list[float]:
    """The library's ByteTrack alone on the same boxes: the share of (a) that is not this project's code."""
    import supervision as sv
    from trackers import ByteTrackTracker

    tracker = ByteTrackTracker(frame_rate=30, track_activation_threshold=0.4, minimum_consecutive_frames=2)
    times = []
    for index, detections in enumerate(walkers(frames)):
        boxes = np.array([[d.box.x1, d.box.y1, d.box.x2, d.box.y2] for d in detections], np.float32)
        found = sv.Detections(
            xyxy=boxes,
            confidence=np.array([d.score for d in detections], np.float32),
            class_id=np.zeros(len(detections), np.int64),
        )
        t0 = time.perf_counter()
        tracker.update(found)
        if index >= warm:
            times.append((time.perf_counter() - t0) * 1e3)
    return times


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


def pipeline_fps(events: bool, data_dir: Path, broker: Broker) -> float:
    config, settings = service_config(events, data_dir, broker)
    manager = StreamManager(config, settings)
    marks: list[float] = []
    pipeline = manager.pipelines["bench"]
    pipeline.add_listener(lambda _: marks.append(time.perf_counter()))
    manager.start()
    deadline = time.monotonic() + 600
    while pipeline.state != "ended" and time.monotonic() < deadline:
        time.sleep(0.05)
    manager.stop()
    warm = 10
    return (len(marks) - 1 - warm) / (marks[-1] - marks[warm])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(machine())
    analyse_ms, events_ms = per_frame_cost()
    total = [a + e for a, e in zip(analyse_ms, events_ms, strict=True)]
    median = statistics.median(total)
    verdict = "met" if median <= 1.0 else "missed"
    print(
        f"(a) 20 people, tracker + 2 zones + 2 lines: median {statistics.median(analyse_ms):.2f} ms, "
        f"p95 {pct(analyse_ms, 95):.2f} ms; events: median {statistics.median(events_ms):.3f} ms; "
        f"all: median {median:.2f} ms, p95 {pct(total, 95):.2f} ms (target <= 1 ms median: {verdict})"
    )
    library = statistics.median(bytetrack_only_cost())
    print(f"    of which trackers' ByteTrackTracker.update alone: median {library:.2f} ms")
    with tempfile.TemporaryDirectory() as folder:
        broker = Broker(Path(folder) / "broker")
        broker.start()
        try:
            off, on = [], []
            for round_ in range(args.rounds):
                off.append(pipeline_fps(False, Path(folder) / f"data-off-{round_}", broker))
                on.append(pipeline_fps(True, Path(folder) / f"data-on-{round_}", broker))
        finally:
            broker.stop()
    ratio = statistics.median(on) / statistics.median(off)
    verdict = "met" if ratio >= 0.95 else "missed"
    print(
        f"(b) pipeline fps, file mode: without events {[round(v, 1) for v in off]}, with tracking + zone + line + "
        f"events + MQTT {[round(v, 1) for v in on]} -> ratio {ratio:.2f} (target >= 0.95: {verdict})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
