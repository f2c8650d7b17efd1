"""ONNX Runtime's CUDA provider on an NVIDIA GPU: the settings that cost or save CPU, side by side.

    python -m benchmarks.cuda_options [--frames 300] [--model onnx/yolox_nano.onnx]

Each setting runs in its own process (a CUDA context's scheduling flag is fixed when the context is made) through
the project's Detector (pre-processing, inference on the GPU, decoding) over the same decoded vtest.avi frames, and
the settings are alternated twice:

- default: ONNX Runtime's own (cuDNN searches every convolution algorithm at the first inference; the CUDA runtime
  spin-waits on a CPU core while the GPU works)
- heuristic: `onnx.cuda_conv_search: heuristic` (cuDNN's own pick, no search: the first inference, `edge detect` on
  one photo)
- blocking-sync: the context made with cudaDeviceScheduleBlockingSync (the waiting thread sleeps)
- both of them

Printed per setting: session load and first frame in seconds, fps, CPU ms per frame (this process, from the
kernel), and ratios to the default measured in the same run. Needs onnxruntime-gpu and an NVIDIA GPU.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import subprocess
import sys
import time

from benchmarks.common import MODELS, VTEST, cpu_seconds, machine, read_frames

HEURISTIC = {"onnx": {"cuda_conv_search": "heuristic"}}
SETTINGS = {  # engine options, and whether the context is made with blocking sync
    "default": ({}, False),
    "heuristic": (HEURISTIC, False),
    "blocking-sync": ({}, True),
    "heuristic+blocking": (HEURISTIC, True),
}
BLOCKING_SYNC = 0x04  # cudaDeviceScheduleBlockingSync (CUDA runtime API, cudaSetDeviceFlags)


def measure(setting: str, model: str, frames: int) -> dict[str, float]:
    import onnxruntime as ort

    from edge_inference.backends.cuda_libraries import missing_cuda_libraries
    from edge_inference.edge.detection.loader import DetectorConfig, load_detector

    options, blocking = SETTINGS[setting]
    if missing_cuda_libraries():
        raise SystemExit(f"no CUDA here: {', '.join(missing_cuda_libraries())} not found")
    if blocking:  # before any context exists: the flag applies to the primary context ONNX Runtime then uses
        cudart = ctypes.CDLL(f"libcudart.so.{ort.cuda_version.split('.')[0]}")
        if cudart.cudaSetDeviceFlags(BLOCKING_SYNC) != 0:
            raise SystemExit("cudaSetDeviceFlags failed")
    images = read_frames(VTEST, frames)
    started = time.perf_counter()
    detector = load_detector(DetectorConfig(str(MODELS / model), "onnx", "cuda", engine_options=options))
    loaded = time.perf_counter() - started
    started = time.perf_counter()
    detector.detect(images[0])
    first = time.perf_counter() - started
    for image in images[:10]:
        detector.detect(image)
    cpu0, started = cpu_seconds(), time.perf_counter()
    for image in images:
        detector.detect(image)
    wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu0
    return {"load_s": loaded, "first_s": first, "fps": len(images) / wall, "cpu_ms": cpu * 1e3 / len(images)}


def _run(result: dict[str, float]) -> str:
    return f"{result['fps']:.0f} fps/{result['cpu_ms']:.2f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--model", default="onnx/yolox_nano.onnx")
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.model, args.frames)))
        return 0
    print(f"# {machine()}\n# {args.model}, {args.frames} frames of {VTEST.name} per setting, alternated twice")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in SETTINGS}
    for _ in range(2):
        for name in SETTINGS:
            command = [sys.executable, "-m", "benchmarks.cuda_options", "--child", name]
            proc = subprocess.run(
                [*command, "--frames", str(args.frames), "--model", args.model], capture_output=True, text=True
            )
            if proc.returncode != 0:
                print(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"{name} failed")
                return 1
            runs[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    base = {key: statistics.mean(r[key] for r in runs["default"]) for key in runs["default"][0]}
    print(f"{'setting':20} {'load s':>7} {'first s':>8} {'fps':>7} {'CPU ms':>7} {'fps/def':>8} {'CPU/def':>8}")
    for name, results in runs.items():
        mean = {key: statistics.mean(r[key] for r in results) for key in results[0]}
        print(
            f"{name:20} {mean['load_s']:7.2f} {mean['first_s']:8.2f} {mean['fps']:7.1f} {mean['cpu_ms']:7.2f} "
            f"{mean['fps'] / base['fps']:8.3f} {mean['cpu_ms'] / base['cpu_ms']:8.3f}"
            f"   (runs: {', '.join(_run(r) for r in results)})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
