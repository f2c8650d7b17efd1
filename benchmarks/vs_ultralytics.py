"""Side by side with Ultralytics' predict loop, on the same int8 YOLOv8n files, in one run (issue 11).

    python -m benchmarks.vs_ultralytics --ultralytics-python /path/to/venv/bin/python [--frames 200] [--parts abc]

Ultralytics is never a dependency of this project: it runs in its own virtual environment (pip install
ultralytics onnxruntime ai-edge-litert there), named by --ultralytics-python. Every figure comes from a fresh
process, ours and theirs alternated:
(a) per-frame overhead: (pre-processing + inference + post-processing) / inference, paired per frame (each
    frame's own three timings: Ultralytics' `Results.speed`, ours `DetectionResult.timings`), median over vtest.avi
    frames, on yolov8n_int8.onnx (ONNX Runtime) and yolov8n_full_integer_quant.tflite (LiteRT)
(b) streaming vtest.avi unpaced (frames 5 to 5 + --stream-frames, after the start-up): ours through the
    pipeline (`edge serve --no-pace`: file mode, its defaults), theirs through `predict(source=..., stream=True)`,
    and a bare loop (OpenCV decode + the engine's run on a prepared tensor, no pre- or post-processing), in
    --repeat interleaved rounds: fps and the process's CPU per frame from the kernel, and its peak RSS.
    Target (issue 23): edge / Ultralytics fps >= 1.05 on yolov8n_int8.onnx
(c) start-up to the first detection on one photo: `edge detect -b onnx` vs `YOLO(file).predict(photo)`
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from benchmarks.common import (
    MEDIA,
    MODELS,
    VTEST,
    cpu_seconds,
    machine,
    overhead_ratio,
    peak_rss_mib,
    read_frames,
    stage_timings,
)

FILES = {
    "yolov8n_int8.onnx": ("onnx", MODELS / "onnx/yolov8n_int8.onnx"),
    "yolov8n int8 .tflite": ("tflite", MODELS / "tflite/yolov8n_full_integer_quant.tflite"),
}

THEIRS = r"""
import json, statistics, sys, time
t0 = time.perf_counter()
import cv2
from ultralytics import YOLO
mode, path, video, frames = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
model = YOLO(path, task="detect")
if mode == "startup":
    result = model.predict(cv2.imread(video), verbose=False)[0]
    print("RESULT", json.dumps({"seconds": time.perf_counter() - t0, "boxes": len(result.boxes)}))
elif mode == "frames":
    capture, ratios = cv2.VideoCapture(video), []
    for index in range(frames + 5):
        ok, image = capture.read()
        speed = model.predict(image, verbose=False)[0].speed
        if index >= 5:
            ratios.append((speed["preprocess"] + speed["inference"] + speed["postprocess"]) / speed["inference"])
    print("RESULT", json.dumps({"ratio": statistics.median(ratios)}))
else:
    import os
    cpu = lambda: sum(os.times()[:4])  # this process and its ended children, from the kernel
    count = 0
    for _ in model.predict(source=video, stream=True, verbose=False):
        count += 1
        if count == 5:
            start, cpu0 = time.perf_counter(), cpu()
        if count == 5 + frames:
            break
    took, spent = time.perf_counter() - start, cpu() - cpu0
    status = open("/proc/self/status").read().split("VmHWM:")[1].split()[0]  # peak RSS of this process alone
    print("RESULT", json.dumps({"fps": frames / took, "cpu_ms": spent * 1e3 / frames, "rss_mib": int(status) / 1024}))
"""


def ours_frames(backend: str, path: str, frames: int) -> dict[str, float]:
    from edge_inference.edge.detection.loader import DetectorConfig, load_detector

    detector = load_detector(DetectorConfig(path, backend=backend))
    images = read_frames(VTEST, frames + 5)
    timings = stage_timings(detector, images)[5:]  # the frames Ultralytics' side times: after 5 warm ones
    return {"ratio": statistics.median(overhead_ratio(t) for t in timings)}


def ours_stream(backend: str, path: str, frames: int) -> dict[str, float]:
    from edge_inference.edge.config import ServiceConfig, StreamConfig
    from edge_inference.edge.runtime.streams import StreamManager

    stream = StreamConfig(id="v", source=str(VTEST), model=path, backend=backend, mode="file", pace=False)
    manager = StreamManager(ServiceConfig(streams=[stream]))
    pipeline = manager.pipelines["v"]
    manager.start()
    while pipeline.stats.frames_processed < 5:
        time.sleep(0.002)
    start, cpu0, first = time.perf_counter(), cpu_seconds(), pipeline.stats.frames_processed
    while pipeline.stats.frames_processed < first + frames and pipeline.state != "ended":
        time.sleep(0.002)
    took, spent, done = time.perf_counter() - start, cpu_seconds() - cpu0, pipeline.stats.frames_processed - first
    manager.stop()
    return {"fps": done / took, "cpu_ms": spent * 1e3 / done, "rss_mib": peak_rss_mib()}


def bare_loop(backend: str, path: str, frames: int) -> dict[str, float]:
    """OpenCV decode + the engine's run on one prepared tensor: what any loop must pay, with nothing else."""
    import cv2

    from edge_inference.edge.detection.loader import DetectorConfig, load_detector

    detector = load_detector(DetectorConfig(path, backend=backend))
    capture = cv2.VideoCapture(str(VTEST))
    _, image = capture.read()
    tensor = detector.prepare(image).tensor
    for _ in range(4):
        capture.read()
        detector.infer(tensor)
    count, start, cpu0 = 0, time.perf_counter(), cpu_seconds()
    while count < frames:
        ok, image = capture.read()
        if not ok:
            break
        detector.infer(tensor)
        count += 1
    took, spent = time.perf_counter() - start, cpu_seconds() - cpu0
    return {"fps": count / took, "cpu_ms": spent * 1e3 / count}


def child(args: argparse.Namespace) -> int:
    backend, path = args.backend, args.path
    if args.child == "frames":
        result = ours_frames(backend, path, args.frames)
    elif args.child == "stream":
        result = ours_stream(backend, path, args.frames)
    else:
        result = bare_loop(backend, path, args.frames)
    print("RESULT " + json.dumps(result))
    return 0


def result_of(command: list[str]) -> dict[str, float]:
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{' '.join(command[:4])} failed:\n{out.stderr[-3000:]}")
    result: dict[str, float] = json.loads(line[7:])
    return result


def ours(kind: str, backend: str, path: str, frames: int) -> dict[str, float]:
    command = [sys.executable, "-m", "benchmarks.vs_ultralytics", "--child", kind, "--backend", backend]
    return result_of([*command, "--path", path, "--frames", str(frames)])


def theirs(python: str, mode: str, path: str, target: str, frames: int) -> dict[str, float]:
    script = THEIRS.replace("__PHOTO__", str(MEDIA / "cat_720p.jpg"))
    return result_of([python, "-c", script, mode, path, target, str(frames)])


def startup_ours(path: str) -> float:
    t0 = time.perf_counter()
    command = [sys.executable, "-m", "edge_inference", "detect", "-m", path, "-b", "onnx", str(MEDIA / "cat_720p.jpg")]
    subprocess.run(command, capture_output=True, check=True)
    return time.perf_counter() - t0


def overhead_figures(python: str, frames: int) -> None:
    print("\n## (a) per-frame (pre + inference + post) / inference, paired per frame, median")
    for name, (backend, path) in FILES.items():
        mine = ours("frames", backend, str(path), frames)["ratio"]
        theirs_ratio = theirs(python, "frames", str(path), str(VTEST), frames)["ratio"]
        print(f"{name:<24} edge {mine:.3f}   Ultralytics {theirs_ratio:.3f}")


def startup_figures(python: str) -> None:
    print("\n## (c) start-up to the first detection on one photo (median of 3, fresh processes)")
    int8_onnx = str(MODELS / "onnx/yolov8n_int8.onnx")
    mine_s, theirs_s = [], []
    for _ in range(3):
        mine_s.append(startup_ours(int8_onnx))
        t0 = time.perf_counter()
        theirs(python, "startup", int8_onnx, str(MEDIA / "cat_720p.jpg"), 0)
        theirs_s.append(time.perf_counter() - t0)
    edge_s, ultralytics_s = statistics.median(mine_s), statistics.median(theirs_s)
    print(f"yolov8n_int8.onnx        edge {edge_s:.2f} s   Ultralytics {ultralytics_s:.2f} s")


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def stream_figures(python: str, frames: int, repeat: int) -> None:
    print(
        f"\n## (b) streaming vtest.avi unpaced, {frames} frames after 5, {repeat} interleaved rounds: fps, CPU ms/frame"
    )
    for name, (backend, path) in FILES.items():
        runs: dict[str, list[dict[str, float]]] = {"bare": [], "edge": [], "ultralytics": []}
        for _ in range(repeat):
            runs["bare"].append(ours("bare", backend, str(path), frames))
            runs["edge"].append(ours("stream", backend, str(path), frames))
            runs["ultralytics"].append(theirs(python, "stream", str(path), str(VTEST), frames))
        for side, figures in runs.items():
            fps, cpu = [round(r["fps"], 2) for r in figures], [round(r["cpu_ms"], 1) for r in figures]
            rss = f", peak RSS {_median(figures, 'rss_mib'):.0f} MiB" if "rss_mib" in figures[0] else ""
            print(f"{name:<24} {side:<12} fps {fps}  CPU ms/frame {cpu}{rss}")
        edge, other = runs["edge"], runs["ultralytics"]
        ratios = [e["fps"] / u["fps"] for e, u in zip(edge, other, strict=True)]
        cpu_ratio = _median(edge, "cpu_ms") / _median(other, "cpu_ms")
        verdict = "met" if min(ratios) >= 1.05 else "missed"
        print(
            f"{name:<24} edge / Ultralytics: fps {[round(r, 3) for r in ratios]} (median "
            f"{statistics.median(ratios):.3f}; target >= 1.05 every round: {verdict}), CPU per frame {cpu_ratio:.3f}; "
            f"edge / bare fps {_median(edge, 'fps') / _median(runs['bare'], 'fps'):.3f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ultralytics-python", default=None)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--stream-frames", type=int, default=300, help="(b): frames timed per run")
    parser.add_argument("--repeat", type=int, default=3, help="(b): interleaved rounds")
    parser.add_argument("--parts", default="abc", help="which parts to run, e.g. b")
    parser.add_argument("--child", choices=["frames", "stream", "bare"])
    parser.add_argument("--backend", default="onnx")
    parser.add_argument("--path", default="")
    args = parser.parse_args()
    if args.child:
        return child(args)
    if not args.ultralytics_python:
        parser.error("--ultralytics-python: the python of a virtual environment with ultralytics installed")
    python = args.ultralytics_python
    version = subprocess.run(
        [python, "-c", "import ultralytics; print(ultralytics.__version__)"], capture_output=True, text=True
    ).stdout.strip()
    print(f"# edge vs Ultralytics {version}, {args.frames} frames of vtest.avi for (a); {machine()}")
    if "a" in args.parts:
        overhead_figures(python, args.frames)
    if "b" in args.parts:
        stream_figures(python, args.stream_frames, args.repeat)
    if "c" in args.parts:
        startup_figures(python)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
