"""Four cameras on one model: one shared engine vs four separate engines vs one bare engine loop (issue 11).

    python -m benchmarks.shared [--seconds 30] [--rounds 2] [--model yolox-nano] [--backend onnx] [--streams 4]

Each setup runs in its own process (so its memory is its own), one after another, `--rounds` times, alternating:
- bare:     one thread: decode a vtest.avi frame, pre-process, infer, decode boxes; frames per second
- shared:   `edge` with 4 streams of vtest.avi (file mode, unpaced, looping), `detectors.share: true`
- separate: the same with `detectors.share: false` (every stream loads its own engine)
Each reports aggregate processed fps over the measured window (after every stream delivered its first frames),
each stream's fps, and the process's peak RSS. Targets: shared >= 0.95 of bare and above separate; per-stream fps
within +-10% of their mean; threads: the default budget in both setups (edge/detection/threads.py).
Batching is not measured: none of the shared models has a dynamic batch dimension (their exports fix the
batch inside the graph), so the scheduler runs them one frame at a time whatever `detectors.max_batch` says.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import VTEST, cpu_by_role, cpu_seconds, machine, peak_rss_mib
from edge_inference.backends.engine import check_engine_options
from edge_inference.edge.config import DetectorsConfig, ServiceConfig, StreamConfig
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.detection.threads import CameraThreads
from edge_inference.edge.runtime.streams import StreamManager
from edge_inference.edge.stream.stats import StreamStats


def run_bare(model: str, backend: str, seconds: float) -> dict[str, object]:
    import cv2

    detector = load_detector(DetectorConfig(model, backend=backend))
    detector.warmup()
    capture = cv2.VideoCapture(str(VTEST))
    frames, deadline = 0, None
    while True:
        ok, image = capture.read()
        if not ok:
            capture.release()
            capture = cv2.VideoCapture(str(VTEST))
            continue
        detector.detect(image)
        if deadline is None:  # the first frame pays for lazy start-up: start the clock after it
            deadline, started, cpu0 = time.monotonic() + seconds, time.monotonic(), cpu_seconds()
            continue
        frames += 1
        if time.monotonic() >= deadline:
            break
    return {
        "fps": frames / (time.monotonic() - started),
        "per_stream": [],
        "rss_mib": peak_rss_mib(),
        "cpu_ms": (cpu_seconds() - cpu0) * 1e3 / max(frames, 1),
    }


def _wait_until(condition: Callable[[], bool], deadline: float, what: str) -> None:
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} within 300 s")
        time.sleep(0.1)


def _settled(fit: CameraThreads[Any] | None) -> bool:
    return fit is None or (fit.judged and not fit.busy)


def _window_inference_ms(stats: StreamStats, frames: int) -> float:
    """The median inference of a stream's last `frames` frames (a camera's latency, beside its CPU)."""
    window = stats.recent_timings(max(1, frames))  # read under the stats' lock: the stream appends meanwhile
    return statistics.median(t.inference_ms for t in window) if window else float("nan")


def run_service(
    model: str,
    backend: str,
    seconds: float,
    streams: int,
    share: bool,
    batch: int,
    threads: int | None = None,
    engine_options: dict[str, dict[str, object]] | None = None,
    live: bool = False,
) -> dict[str, object]:
    """`streams` streams of vtest.avi: files read unpaced (every frame, as fast as the engine allows), or with
    `live`, cameras (the newest frame, at the file's own fps)."""
    config = ServiceConfig(
        detectors=DetectorsConfig(share=share, max_batch=batch),
        streams=[
            StreamConfig(
                id=f"cam{i}",
                source=str(VTEST),
                model=model,
                backend=backend,
                mode="live" if live else "file",
                pace=live,
                loop=True,
                threads=threads,
                engine_options=check_engine_options(engine_options or {}),
            )
            for i in range(streams)
        ],
    )
    manager = StreamManager(config)
    manager.start()
    try:
        deadline, pipelines = time.monotonic() + 300, list(manager.pipelines.values())
        _wait_until(lambda: all(p.stats.frames_processed >= 5 for p in pipelines), deadline, "streams did not start")
        # a camera's engine is first judged on the threads that keep up with it: measured as it then runs
        judged = "the cameras' engine threads were not judged"
        _wait_until(lambda: not live or all(_settled(p.camera_threads) for p in pipelines), deadline, judged)
        before = [p.stats.frames_processed for p in manager.pipelines.values()]
        t0, cpu0, roles0 = time.monotonic(), cpu_seconds(), cpu_by_role()
        time.sleep(seconds)
        after = [p.stats.frames_processed for p in manager.pipelines.values()]
        elapsed, cpu, roles1 = time.monotonic() - t0, cpu_seconds() - cpu0, cpu_by_role()
        per_stream = [(b - a) / elapsed for a, b in zip(before, after, strict=True)]
        engines = len(manager.detectors.engines())
        inference_ms = _window_inference_ms(pipelines[0].stats, after[0] - before[0])
    finally:
        manager.stop()
    frames = sum(after) - sum(before)
    return {
        "fps": sum(per_stream),
        "per_stream": per_stream,
        "rss_mib": peak_rss_mib(),
        "engines": engines,
        "cpu_ms": cpu * 1e3 / max(frames, 1),
        "inference_ms": inference_ms,
        # where each frame's CPU goes, by the threads' roles (infer, capture, decode, other)
        "roles_ms": {r: (roles1[r] - roles0.get(r, 0.0)) * 1e3 / max(frames, 1) for r in roles1},
    }


def child(args: argparse.Namespace) -> int:
    if args.setup == "bare":
        result = run_bare(args.model, args.backend, args.seconds)
    else:
        result = run_service(args.model, args.backend, args.seconds, args.streams, args.setup != "separate", args.batch)
    print("RESULT " + json.dumps(result))
    return 0


def launch(setup: str, args: argparse.Namespace, model: str, batch: int = 1) -> dict[str, object]:
    command = [sys.executable, "-m", "benchmarks.shared", "--child", setup, "--model", model]
    command += ["--backend", args.backend, "--seconds", str(args.seconds), "--streams", str(args.streams)]
    command += ["--batch", str(batch)]
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{setup} failed:\n{out.stderr[-2000:]}")
    result: dict[str, object] = json.loads(line[7:])
    return result


def report(name: str, runs: list[dict[str, object]]) -> tuple[float, float]:
    """Prints a setup's figures; (median fps, median CPU ms per frame)."""
    fps = statistics.median(float(r["fps"]) for r in runs)  # type: ignore[arg-type]
    cpu = statistics.median(float(r["cpu_ms"]) for r in runs)  # type: ignore[arg-type]
    rss = max(float(r["rss_mib"]) for r in runs)  # type: ignore[arg-type]
    streams = runs[-1]["per_stream"]
    spread = ""
    if streams:
        values = [float(v) for v in streams]  # type: ignore[attr-defined]
        mean = statistics.mean(values)
        worst = max(abs(v - mean) / mean for v in values) if mean else 0.0
        spread = f"  per stream {', '.join(f'{v:.2f}' for v in values)} (max deviation {worst:.1%})"
    print(f"{name:<22}{fps:8.2f} fps  {cpu:6.2f} ms CPU/frame  peak RSS {rss:6.0f} MiB{spread}")
    return fps, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--model", default="yolox-nano")
    parser.add_argument("--backend", default="onnx")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the three setups")
    parser.add_argument("--child", choices=["bare", "shared", "separate"], dest="setup")
    args = parser.parse_args()
    if args.setup:
        return child(args)
    print(f"# {args.streams} streams of vtest.avi, {args.model} on {args.backend}, {args.seconds:g} s per run")
    print(f"# {machine()}")
    runs: dict[str, list[dict[str, object]]] = {"bare": [], "shared": [], "separate": []}
    for _ in range(args.rounds):
        for setup in runs:
            runs[setup].append(launch(setup, args, args.model))
    bare, _ = report("bare engine loop", runs["bare"])
    shared, shared_cpu = report(f"shared ({args.streams} streams)", runs["shared"])
    separate, separate_cpu = report(f"separate ({args.streams} engines)", runs["separate"])
    pairs = [float(a["cpu_ms"]) / float(b["cpu_ms"]) for a, b in zip(runs["shared"], runs["separate"], strict=True)]  # type: ignore[arg-type]
    values = [float(v) for v in runs["shared"][-1]["per_stream"]]  # type: ignore[attr-defined]
    mean = statistics.mean(values)
    fair = max(abs(v - mean) / mean for v in values) <= 0.10
    print(f"shared / bare      {shared / bare:.3f}  target >= 0.95: {'met' if shared / bare >= 0.95 else 'MISSED'}")
    print(f"shared / separate  {shared / separate:.3f}  target > 1: {'met' if shared > separate else 'MISSED'}")
    print(f"per-stream fps within +-10%: {'met' if fair else 'MISSED'}")
    ratio = shared_cpu / separate_cpu
    each = ", ".join(f"{p:.3f}" for p in pairs)
    print(
        f"CPU per frame shared / separate {ratio:.3f} (each round {each})  "
        f"target <= 1.02: {'met' if ratio <= 1.02 else 'MISSED'}"
    )
    report_roles(runs["shared"], runs["separate"])
    return 0


def report_roles(shared: list[dict[str, object]], separate: list[dict[str, object]]) -> None:
    print("where a frame's CPU goes, shared / separate, ms (median of the rounds):")
    for role in ("infer", "capture", "decode", "other", "children"):
        ours = statistics.median(_role_ms(r, role) for r in shared)
        theirs = statistics.median(_role_ms(r, role) for r in separate)
        print(f"    {role:<8} {ours:6.2f} / {theirs:6.2f}  ({ours / theirs if theirs else float('nan'):.3f})")


def _role_ms(run: dict[str, object], role: str) -> float:
    """A role's CPU ms per frame in one run; `children`: the rest of the process's count (its child processes and
    threads that ended)."""
    roles: dict[str, float] = run["roles_ms"]  # type: ignore[assignment]
    if role == "children":
        return float(run["cpu_ms"]) - sum(roles.values())  # type: ignore[arg-type]
    return roles.get(role, 0.0)


if __name__ == "__main__":
    raise SystemExit(main())
