"""Default engine threads vs every hand-picked setting, per engine, on 1 and 4 streams (issue 11).

    python -m benchmarks.threads [--seconds 10]

1 stream: a detect loop over vtest.avi frames (pre-processing, inference, decoding) with the default threads
(the budget: edge/detection/threads.py) and with each count from 1 to the machine's cores. 4 streams: the service
with four vtest.avi streams on one shared engine (file mode, unpaced), default vs each `threads:` setting (which
also sets how many lanes the shared engine gets). Settings are alternated; target: default >= 0.95 of the best setting.
"""

from __future__ import annotations

import argparse
import time

from benchmarks.common import MODELS, VTEST, machine, read_frames
from benchmarks.shared import run_service
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.detection.threads import usable_cores

ENGINES = {
    "onnx": str(MODELS / "onnx/yolox_nano.onnx"),
    "openvino": str(MODELS / "openvino/yolox_nano.xml"),
    "tflite": str(MODELS / "tflite/yolov8n_full_integer_quant.tflite"),
}


def one_stream_fps(model: str, backend: str, threads: int | None, frames: list, seconds: float) -> float:
    detector = load_detector(DetectorConfig(model, backend=backend, threads=threads))
    detector.warmup()
    done, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        detector.detect(frames[done % len(frames)])
        done += 1
    fps = done / (time.monotonic() - started)
    detector.close()
    return fps


def verdict(name: str, results: dict[str, float]) -> None:
    best_name = max(results, key=lambda k: results[k])
    ratio = results["default"] / results[best_name]
    row = "  ".join(f"{k} {v:6.2f}" for k, v in results.items())
    status = "met" if ratio >= 0.95 else "MISSED"
    print(f"{name:<22}{row}   default/best ({best_name}) {ratio:.3f}  target >= 0.95: {status}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    cores = usable_cores()
    frames = read_frames(VTEST, 60)
    print(f"# default threads vs hand-picked, fps; {args.seconds:g} s per setting, alternated twice")
    print(f"# {machine()}; usable cores {cores}")
    settings: list[int | None] = [None, *range(1, cores + 1)]
    for backend, model in ENGINES.items():
        single: dict[str, list[float]] = {}
        multi: dict[str, list[float]] = {}
        for _ in range(2):
            for threads in settings:
                name = "default" if threads is None else f"t{threads}"
                single.setdefault(name, []).append(one_stream_fps(model, backend, threads, frames, args.seconds))
            for threads in settings:
                name = "default" if threads is None else f"t{threads}"
                fps = run_service(model, backend, args.seconds, 4, True, 1, threads=threads)["fps"]
                multi.setdefault(name, []).append(float(fps))  # type: ignore[arg-type]
        verdict(f"{backend} 1 stream", {k: max(v) for k, v in single.items()})
        verdict(f"{backend} 4 streams", {k: max(v) for k, v in multi.items()})
    print("# each figure is the better of its two runs; a t<N> of 4 streams is `threads: N` on every stream")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
