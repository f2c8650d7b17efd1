"""Auto's timing child, one per engine: `python -m edge_inference.edge.detection.auto.worker --candidate JSON
[--frames FILE.npz]`. It opens the engine named (`opening.py`), warms it up, says `ready` (or the error) on
stdout, then for each number of seconds read on stdin runs whole frames that long and answers with its figures."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from edge_inference.backends import brief
from edge_inference.edge.detection.auto.figures import WARM_RUNS, Candidate
from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.opening import DetectorConfig, open_detector
from edge_inference.edge.detection.timings import process_cpu_seconds
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import get_settings

# (model, backend, device) -> a loaded detector (`open_detector` here; a test may pass its own)
Load = Callable[[str, str, str], Detector]


def bench_image() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)


def serve_rounds(candidate: Candidate, load: Load, frames: list[np.ndarray], requests: Any, replies: Any) -> None:
    """The child's side: load and warm up, say `ready` (or the error), then for each line of `requests` (seconds)
    run whole frames that long and reply with the frames done, the seconds and the CPU seconds they took."""

    def reply(message: dict[str, Any]) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    try:
        detector = load(candidate.model, candidate.backend, candidate.device)
        for index in range(WARM_RUNS):
            detector.detect(frames[index % len(frames)])
    except Exception as exc:  # noqa: BLE001 - an engine that cannot load or run here is reported, not fatal
        reply({"error": brief(str(exc)) or type(exc).__name__})
        return
    reply({"ready": True})
    done = 0
    try:
        for line in requests:
            seconds = float(line)
            count, inference, t0, cpu0 = 0, 0.0, time.perf_counter(), process_cpu_seconds()
            while count < 3 or time.perf_counter() - t0 < seconds:
                inference += detector.detect(frames[done % len(frames)]).timings.inference_ms
                count += 1
                done += 1
            took, cpu = time.perf_counter() - t0, process_cpu_seconds() - cpu0
            reply({"frames": count, "seconds": took, "cpu_s": cpu, "infer_ms": inference / count})
    finally:
        detector.close()


def timed_frames(path: Path | None) -> list[np.ndarray]:
    """The frames the parent decoded once for every child (`np.savez`, in order), or a fixed noise image."""
    if path is None:
        return [bench_image()]
    with np.load(path) as saved:
        return [saved[name] for name in sorted(saved.files, key=lambda name: int(name.removeprefix("frame")))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="auto-worker", description=__doc__)
    parser.add_argument("--candidate", required=True, help="the engine to time: JSON of a Candidate")
    parser.add_argument("--frames", type=Path, help="frames to time on (.npz); default: a fixed noise image")
    args = parser.parse_args(argv)
    settings = get_settings()

    def load(model: str, backend: str, device: str) -> Detector:
        # timed as the service runs a camera's engine: its threads idle between frames, not spinning
        return open_detector(DetectorConfig(model, backend, device, back_to_back=False), settings)

    try:
        candidate = Candidate(**json.loads(args.candidate))
        frames = timed_frames(args.frames)
    except (TypeError, ValueError, OSError, EdgeError) as exc:
        print(f"error: {brief(str(exc)) or type(exc).__name__}", file=sys.stderr)
        return 1
    serve_rounds(candidate, load, frames, sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
