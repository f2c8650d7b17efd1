"""Model x backend on this machine: the table Coral's and Ultralytics' benchmarks print, with agreement.

    python -m benchmarks.backends [--frames 200]

Runs `edge bench` on vtest.avi over every registry model family and every engine, the reference being ONNX
Runtime on the CPU for ONNX families and LiteRT for TFLite-only ones; pairs that cannot run here are listed with
the reason.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from benchmarks.common import VTEST


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--out", default="bench-out/backends")
    args = parser.parse_args()
    common = ["--source", str(VTEST), "--frames", str(args.frames), "--no-progress"]
    runs = [
        ("yolox-nano,nanodet-m,yolov8n-int8", "onnx,openvino:CPU,tflite,edgetpu", "onnx"),
        ("ssd-mobilenet-v2", "tflite,onnx,openvino:CPU,edgetpu", "tflite"),
        ("yolov8n-int8-320", "tflite,openvino:CPU,edgetpu", "tflite"),
    ]
    for index, (models, backends, reference) in enumerate(runs):
        command = [
            sys.executable,
            "-m",
            "edge",
            "bench",
            *common,
            "--models",
            models,
            "--backends",
            backends,
            "--reference",
            reference,
            "--out",
            f"{args.out}/{index}",
        ]
        proc = subprocess.run(command, check=False)  # the mirror: set by benchmarks.common
        if proc.returncode not in (0, 1):
            return proc.returncode
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
