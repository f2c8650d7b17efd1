"""Motion gating: CPU time of still periods, and the tracks still found, with gating vs without (issue 11).

    python -m benchmarks.motion [--still-seconds 60]

The test clip is built here from the shared media, never committed: the street of vtest.avi without anyone on it
(the per-pixel median of 53 frames spread over the video: people move on, the street stays) shown for
`--still-seconds` with sensor noise (Gaussian, sigma 2 grey levels) and a clock burnt into its top-left corner
(ignored by the gate through `motion.ignore`), then all 795 frames of vtest.avi (people walking), then the empty
street again. Written as MJPG at 10 fps. Each run is the service's pipeline on that file (file mode, unpaced,
yolox-nano on ONNX Runtime, tracking on), gated and ungated, alternated.

CPU time is the process's user + system time while the clip plays (decoding included: it is the same in both).
"Still periods" are measured on a clip of the still part alone. Tracks found = tracks that lived >= 3 frames.
Targets: still periods gated <= 0.15 of ungated; tracks found gated >= 0.98 of ungated.

`--intervals 2,3` also measures the other way to save work, detecting on every Nth frame only with the tracker
following at that rate: vtest.avi decimated to every Nth frame (written at 10/N fps, the tracker told so), tracks
found against every frame.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

from benchmarks.common import MODELS, VTEST, cpu_seconds, machine
from edge_inference.edge.config import FFmpegConfig, MotionConfig, ServiceConfig, StreamConfig, TrackingConfig
from edge_inference.edge.runtime.streams import StreamManager

FPS = 10.0
CLOCK = [(0.0, 0.0), (0.6, 0.0), (0.6, 0.1), (0.0, 0.1)]


def vtest_frames() -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(VTEST))
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame)
    capture.release()
    return frames


def still_frames(empty: np.ndarray, seconds: float, rng: np.random.Generator, start_s: int) -> list[np.ndarray]:
    frames = []
    for i in range(int(seconds * FPS)):
        frame = np.clip(empty + rng.normal(0, 2.0, empty.shape), 0, 255).astype(np.uint8)
        second = start_s + int(i / FPS)
        cv2.putText(frame, f"2026-11-22 10:{second // 60 % 60:02d}:{second % 60:02d}", (10, 30), 0, 1, (255,) * 3, 2)
        frames.append(frame)
    return frames


def write_clip(path: Path, frames: list[np.ndarray], fps: float = FPS) -> None:
    height, width = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"MJPG"), fps, (width, height))
    for frame in frames:
        writer.write(frame)
    writer.release()


def play(clip: Path, gated: bool, fps: float | None = None, ffmpeg: bool = False) -> tuple[float, int, int]:
    """(CPU seconds, frames inferred, tracks that lived >= 3 frames). `ffmpeg`: the FFmpeg source, scaled to 416
    wide inside FFmpeg (its CPU counted: it has ended and been waited for when the CPU is read)."""
    stream = StreamConfig(
        fps=fps,
        width=416 if ffmpeg else None,
        ffmpeg=FFmpegConfig() if ffmpeg else None,
        id="clip",
        source=str(clip),
        model=str(MODELS / "onnx/yolox_nano.onnx"),
        backend="onnx",
        mode="file",
        pace=False,
        tracking=TrackingConfig(),
        motion=MotionConfig(ignore=[CLOCK]) if gated else None,
    )
    manager = StreamManager(ServiceConfig(streams=[stream]))
    pipeline = manager.pipelines["clip"]
    lives: dict[int, int] = {}

    def count(result: object) -> None:
        for detection in result.detections:  # type: ignore[attr-defined]
            if detection.track_id is not None:
                lives[detection.track_id] = lives.get(detection.track_id, 0) + 1

    pipeline.add_listener(count)
    manager.start()
    while pipeline.detector is None:
        time.sleep(0.05)
    before = cpu_seconds()
    while pipeline.state != "ended":
        time.sleep(0.05)
    manager.stop()
    spent = cpu_seconds() - before
    return spent, pipeline.stats.frames_processed, sum(1 for n in lives.values() if n >= 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--still-seconds", type=float, default=60)
    parser.add_argument("--intervals", default="", help="e.g. 2,3: also detect on every Nth frame only")
    parser.add_argument("--ffmpeg", action="store_true", help="also the still clip through the FFmpeg source")
    args = parser.parse_args()
    walking = vtest_frames()
    if args.intervals:
        return intervals(walking, [int(n) for n in args.intervals.split(",")])
    empty = np.median(np.stack(walking[::15]), axis=0).astype(np.uint8)
    rng = np.random.default_rng(0)
    still_a = still_frames(empty, args.still_seconds, rng, 0)
    still_b = still_frames(empty, args.still_seconds, rng, int(args.still_seconds) + 80)
    with tempfile.TemporaryDirectory() as folder:
        full, still = Path(folder) / "clip.avi", Path(folder) / "still.avi"
        write_clip(full, still_a + walking + still_b)
        write_clip(still, still_a)
        minutes_full = (len(still_a) + len(walking) + len(still_b)) / FPS / 60
        minutes_still = len(still_a) / FPS / 60
        print(
            f"# clip: {args.still_seconds:g} s still + {len(walking) / FPS:g} s of vtest.avi + {args.still_seconds:g} s"
        )
        print(f"# {machine()}")
        runs: dict[tuple[str, bool], list[tuple[float, int, int]]] = {}
        for _ in range(2):
            for gated in (False, True):
                runs.setdefault(("still", gated), []).append(play(still, gated))
                runs.setdefault(("full", gated), []).append(play(full, gated))
                if args.ffmpeg:
                    runs.setdefault(("still-ffmpeg", gated), []).append(play(still, gated, ffmpeg=True))
    verdicts(runs, minutes_full, minutes_still, args.ffmpeg)
    return 0


def verdicts(
    runs: dict[tuple[str, bool], list[tuple[float, int, int]]], minutes_full: float, minutes_still: float, ffmpeg: bool
) -> None:
    for (clip, gated), results in sorted(runs.items()):
        cpu = min(r[0] for r in results)
        minutes = minutes_full if clip == "full" else minutes_still
        print(
            f"{clip:<6}{'gated' if gated else 'ungated':<9} CPU {cpu / minutes:7.2f} s per minute of video, "
            f"{results[0][1]} frames inferred, {results[0][2]} tracks found"
        )
    still_ratio = min(r[0] for r in runs[("still", True)]) / min(r[0] for r in runs[("still", False)])
    tracks_ratio = runs[("full", True)][0][2] / max(1, runs[("full", False)][0][2])
    still_ok, tracks_ok = still_ratio <= 0.15, tracks_ratio >= 0.98
    print(f"still periods, gated / ungated CPU  {still_ratio:.3f}  target <= 0.15: {'met' if still_ok else 'MISSED'}")
    if ffmpeg:
        gated_ffmpeg = min(r[0] for r in runs[("still-ffmpeg", True)])
        ratio = gated_ffmpeg / min(r[0] for r in runs[("still", False)])
        print(
            f"still periods, gated on the FFmpeg source (416 wide) / ungated OpenCV CPU  {ratio:.3f}  "
            f"target <= 0.15: {'met' if ratio <= 0.15 else 'MISSED'}"
        )
    print(f"tracks found, gated / ungated       {tracks_ratio:.3f}  target >= 0.98: {'met' if tracks_ok else 'MISSED'}")


def intervals(walking: list[np.ndarray], steps: list[int]) -> int:
    """Line crossings of deploy/events.example.yaml's line, detecting on every Nth frame of vtest.avi only, against
    the count made by eye (in 6, out 8: tests/test_tracking.py)."""
    import yaml

    from edge_inference.edge.detection.loader import DetectorConfig, load_detector
    from edge_inference.edge.stream.tracking import StreamTracker

    example = StreamConfig.model_validate(yaml.safe_load(Path("deploy/events.example.yaml").read_text())["streams"][0])
    detector = load_detector(DetectorConfig(example.model, backend="onnx", conf=example.conf))
    print("# detect on every Nth frame of vtest.avi, tracker at that rate; crossings of the example's line")
    for step in [1, *steps]:
        assert example.tracking is not None
        tracker = StreamTracker(example.tracking, [], example.lines)
        crossed = (0, 0)
        for index, frame in enumerate(walking[::step]):
            result = detector.detect(frame)
            analysis = tracker.analyse(result.detections, result.width, result.height, index * step / FPS)
            crossed = (analysis.lines[0].crossed_in, analysis.lines[0].crossed_out)
        found = min(crossed[0], 6) + min(crossed[1], 8)
        print(f"every {step} frame(s): in {crossed[0]}, out {crossed[1]} (by eye 6 / 8): {found / 14:.0%} of crossings")
    detector.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
