"""Where yolox-nano's int8 agreement is lost, and what keeping layers in float costs (issue 59).

    python -m benchmarks.int8_layers [--frames 100] [--keep 0,14,60] [--rounds 3]

`edge models convert yolox-nano --to onnx-int8`'s quantisation (ONNX Runtime's `quantize_static`, the head in
float) made once per `--keep` figure, with the graph's first N nodes also kept in float, calibrated on frames spread
over the shared video's first half and judged on its second half as the conversion judges (agreement with the float
model over the classes it found 10+ times, per class). Then CPU per frame (one thread, the process's CPU time from
the kernel) of the float model and every variant, in `--rounds` alternating passes over the evaluation frames, the
medians: one pass measured 0.67 and 0.87 for the same file on this shared machine. All in one run, side by side: a
ratio is only read against its own run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from benchmarks.common import MODELS, VTEST, machine
from benchmarks.convert import detector_cpu_ms
from edge_inference.edge.tools.calibration import Frames, calibration_frames
from edge_inference.edge.tools.convert import _judge, _loaded, _table
from edge_inference.edge.tools.quantize import DEFAULT_METHOD, onnx_int8


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--keep", default="0,14,60", help="first nodes kept in float, one conversion each")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    source = MODELS / "onnx" / "yolox_nano.onnx"
    print(f"# {machine()}; {args.frames} calibration and {args.frames} evaluation frames of {VTEST.name}")
    frames = calibration_frames(str(VTEST), None, args.frames, args.frames, progress=False)
    evaluation = Frames.decoded(frames.evaluation)
    floating = _loaded(source, "onnx", "yolox")
    tensors = [floating.prepare(frame).tensor.copy() for frame in Frames.decoded(frames.calibration)]
    print("first nodes in float | nodes in float | agreement | per class")
    with tempfile.TemporaryDirectory() as folder:
        files = {"float": source}
        for keep in (int(k) for k in args.keep.split(",")):
            target = Path(folder) / f"int8-{keep}.onnx"
            record = onnx_int8(source, target, tensors, DEFAULT_METHOD, keep_first=keep)
            int8 = _loaded(target, "onnx", "yolox")
            try:
                table = _table(*_judge(floating, int8, evaluation), (1, 1))
            finally:
                int8.close()
            print(f"{keep} | {len(record['kept_in_float'])} | {table['agreement_map50']} | "
                  f"{table['agreement_per_class']}", flush=True)  # fmt: skip
            files[f"int8, first {keep} in float"] = target
        floating.close()
        timed: dict[str, list[float]] = {name: [] for name in files}
        for _ in range(args.rounds):
            for name, path in files.items():
                timed[name].append(detector_cpu_ms(_loaded(path, "onnx", "yolox"), evaluation))
    medians = {name: statistics.median(values) for name, values in timed.items()}
    for name, value in medians.items():
        rounds = ", ".join(f"{v:.2f}" for v in timed[name])
        print(f"{name}: {value:.2f} ms CPU per frame (rounds {rounds}); / float {value / medians['float']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
