"""Memory of an engine's lanes: what a 4-core machine's plan (4 cameras sharing one engine: 4 lanes of 1 thread)
costs over one lane, per engine and model.

    python -m benchmarks.lanes_memory

Each figure is a fresh process that loads the engine through the service's own pool (copies for LiteRT, one
session for ONNX Runtime, a CPU stream per lane for OpenVINO), runs every lane at once ten times on a blank frame,
and prints its peak RSS. Memory does not depend on the cores' count or speed, so this 2-core machine gives the
figure a 4-core Raspberry Pi would (the engines' arenas are the same size on arm64).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading

import numpy as np

from benchmarks.common import MODELS, machine, peak_rss_mib
from edge_inference.backends import BackendOptions
from edge_inference.edge.detection.detector_pool import DetectorPool

CASES = {
    "yolox-nano (onnx)": ("onnx", "onnx/yolox_nano.onnx"),
    "yolov8n int8 (onnx)": ("onnx", "onnx/yolov8n_int8.onnx"),
    "yolox-nano IR (openvino)": ("openvino", "openvino/yolox_nano.xml"),
    "yolox-nano fp16 (tflite)": ("tflite", "tflite/yolox_nano_float16_quantize.tflite"),
    "yolov8n int8 (tflite)": ("tflite", "tflite/yolov8n_full_integer_quant.tflite"),
}
LANES = (1, 2, 4)
RUNS = 10


def one(engine: str, model: str, lanes: int) -> float:
    """Peak RSS (MiB) of this process after loading `lanes` lanes and running them all at once."""
    handle = DetectorPool().acquire("bench", engine, MODELS / model, BackendOptions(threads=1), lanes=lanes)
    tensor = handle.inputs[0]
    shape = [d if d > 0 else 1 for d in tensor.shape]  # a dynamic dimension (-1): one
    blank = np.zeros(shape, dtype=tensor.dtype)
    together = threading.Barrier(lanes)

    def lane() -> None:
        for _ in range(RUNS):
            together.wait()
            handle.run(blank)

    workers = [threading.Thread(target=lane) for _ in range(lanes)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    handle.close()
    return peak_rss_mib()


def measured(engine: str, model: str, lanes: int) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.lanes_memory", "--one", engine, model, str(lanes)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", nargs=3, metavar=("ENGINE", "MODEL", "LANES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        engine, model, lanes = args.one
        print(f"{one(engine, model, int(lanes)):.0f}")
        return 0
    print(f"# peak RSS (MiB) with every lane running at once, fresh process each; {machine()}")
    for name, (engine, model) in CASES.items():
        peaks = {lanes: measured(engine, model, lanes) for lanes in LANES}
        extra = (peaks[LANES[-1]] - peaks[1]) / (LANES[-1] - 1)
        row = " | ".join(f"{lanes} lane{'s' if lanes > 1 else ''} {peak:4.0f}" for lanes, peak in peaks.items())
        print(f"{name:<26} {row} | per extra lane +{extra:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
