"""Run in rknn-toolkit2's own environment (`toolchains.py`), never imported by the service: an ONNX model converted
to a `.rknn` for one Rockchip NPU with int8 quantisation on the given calibration pixels, then run on Rockchip's
simulator (`init_runtime()` without a target) on the evaluation pixels, so that the very file that goes to the board
is the one judged. Only numpy and rknn-toolkit2 are imported here.

    python rknn_build.py --onnx F.onnx --platform rk3588 --dataset D.txt --mean 0,0,0 --std 1,1,1
        --output F.rknn --evaluate frames.npz --results outputs.npz

Pixels are letterboxed uint8 NHWC in the model's own colour order (as `.npy` files, one per calibration frame): the
mean and std given are the model's normalisation, compiled into the `.rknn` as the board's runtime expects.
Failures are one `error:` line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--onnx", type=Path, required=True)
    parser.add_argument("--platform", required=True)
    parser.add_argument("--dataset", type=Path, required=True, help="a text file: one calibration .npy a line")
    parser.add_argument("--mean", required=True)
    parser.add_argument("--std", required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--evaluate", type=Path, required=True, help=".npz of evaluation pixels, frame0, frame1, ...")
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--float-subgraphs", type=Path, help="JSON: [[input tensor, output tensor], ...] in float16")
    args = parser.parse_args()
    from rknn.api import RKNN  # only in the toolchain's environment

    normalised = {"mean_values": [_floats(args.mean)], "std_values": [_floats(args.std)]}
    if args.float_subgraphs is not None and not _hybrid_first_step(RKNN, args, normalised):
        return 1
    rknn = RKNN(verbose=False)
    try:
        made: tuple[tuple[str, Callable[[], int]], ...]
        if args.float_subgraphs is None:
            made = (
                ("load_onnx", lambda: rknn.load_onnx(model=str(args.onnx))),
                ("build", lambda: rknn.build(do_quantization=True, dataset=str(args.dataset))),
            )
        else:  # the first step's files, read by a toolkit that has loaded no model (Rockchip's step2.py)
            name = args.onnx.stem
            made = (
                (
                    "hybrid_quantization_step2",
                    lambda: rknn.hybrid_quantization_step2(
                        model_input=f"{name}.model",
                        data_input=f"{name}.data",
                        model_quantization_cfg=f"{name}.quantization.cfg",
                    ),
                ),
            )
        steps = (
            ("config", lambda: rknn.config(**normalised, target_platform=args.platform)),
            *made,
            ("export_rknn", lambda: rknn.export_rknn(str(args.output))),
            ("init_runtime (the simulator)", lambda: rknn.init_runtime()),
        )
        if not _ran(steps):
            return 1
        outputs: dict[str, Any] = {}
        with np.load(args.evaluate) as frames:
            names = sorted(frames.files, key=lambda name: int(name.removeprefix("frame")))
            for index, name in enumerate(names):
                found = rknn.inference(inputs=[frames[name]], data_format="nhwc")
                for number, output in enumerate(found):
                    outputs[f"frame{index}_{number}"] = np.asarray(output)
        np.savez(args.results, **outputs)
    finally:
        with contextlib.suppress(Exception):
            rknn.release()
    return 0


def _ran(steps: tuple[tuple[str, Callable[[], int]], ...]) -> bool:
    for name, step in steps:
        print(f"rknn-toolkit2: {name}", file=sys.stderr, flush=True)
        if step() != 0:
            print(f"error: rknn-toolkit2's {name} failed (its log above says why)", file=sys.stderr)
            return False
    return True


def _hybrid_first_step(RKNN: Any, args: argparse.Namespace, normalised: dict[str, Any]) -> bool:
    """Rockchip's hybrid quantisation, first step: the subgraphs named ([[input tensor, output tensor], ...]) marked
    float16 in NAME.model, NAME.data and NAME.quantization.cfg, written into the working folder for the second."""
    pairs = json.loads(args.float_subgraphs.read_text())
    rknn = RKNN(verbose=False)
    try:
        return _ran(
            (
                ("config", lambda: rknn.config(**normalised, target_platform=args.platform)),
                ("load_onnx", lambda: rknn.load_onnx(model=str(args.onnx))),
                (
                    "hybrid_quantization_step1",
                    lambda: rknn.hybrid_quantization_step1(dataset=str(args.dataset), custom_hybrid=pairs),
                ),
            )
        )
    finally:
        with contextlib.suppress(Exception):
            rknn.release()


def _floats(text: str) -> list[float]:
    return [float(value) for value in text.split(",")]


if __name__ == "__main__":
    sys.exit(main())
