"""Where yolox-nano's int8 agreement is lost, and what keeping layers in float costs (issue 59).

    python -m benchmarks.int8_layers [--engine onnx|openvino] [--frames 100] [--stem 0,2,4] [--rounds 3]
        [--operators qdq,qoperator] [--by-operator 40]

`edge models convert yolox-nano --to onnx-int8`'s quantisation (ONNX Runtime's `quantize_static`, the head in
float), or `--to openvino-int8`'s (NNCF) with `--engine openvino`, made once per `--stem` figure: the stem up to its
Nth convolution also kept in float (0: the head alone; 4: the conversion's default). Calibrated on frames spread over
the shared video's first half and judged on its second half as the conversion judges (agreement with the float
model over the classes it found 10+ times, per class). Then CPU per frame (one thread, the process's CPU time from
the kernel) of the float model and every variant, in `--rounds` alternating passes over the evaluation frames, the
medians: one pass measured 0.67 and 0.87 for the same file on this shared machine. All in one run, side by side: a
ratio is only read against its own run. `--operators` (onnx): ONNX Runtime's operator format, QDQ (the
conversion's) and/or QOperator, one conversion each per stem figure. `--by-operator RUNS` (onnx): where each file's
time goes, by operator type, from ONNX Runtime's own profiler (one thread, RUNS runs of one evaluation frame; the
profiler's per-node overhead inflates files with more nodes, so read it beside the CPU figures above, not for them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks.common import MODELS, VTEST, machine
from benchmarks.convert import detector_cpu_ms
from edge_inference.edge.tools.conversion.calibration import Frames, calibration_frames
from edge_inference.edge.tools.conversion.convert import _judge, _loaded, _table
from edge_inference.edge.tools.conversion.quantize import DEFAULT_METHOD, onnx_int8, openvino_int8


def quantized(engine: str, source: Path, folder: str, tensors: list, convs: int, operators: str) -> tuple[Path, dict]:
    if engine == "onnx":
        target = Path(folder) / f"int8-{convs}-{operators}.onnx"
        return target, onnx_int8(source, target, tensors, DEFAULT_METHOD, stem_convs=convs, operators=operators)
    target = Path(folder) / f"int8-{convs}.xml"
    return target, openvino_int8(source, target, tensors, stem_convs=convs)


def kernel_ms_by_operator(path: Path, tensor: np.ndarray, runs: int, folder: str) -> Counter[str]:
    """ONNX Runtime's profiler on one thread: each operator type's kernel time per run, in ms."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.enable_profiling = True
    options.profile_file_prefix = str(Path(folder) / f"profile-{path.stem}")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: tensor}
    for _ in range(runs):
        session.run(None, feed)
    events = json.loads(Path(session.end_profiling()).read_text())
    spent: Counter[str] = Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            spent[event["args"]["op_name"]] += event["dur"] / 1e3 / runs
    return spent


def print_by_operator(files: dict[str, Path], tensor: np.ndarray, runs: int, folder: str) -> None:
    spent = {name: kernel_ms_by_operator(path, tensor, runs, folder) for name, path in files.items()}
    print(f"kernel ms per run by operator (ONNX Runtime's profiler, one thread, {runs} runs):")
    print(" | ".join(["operator", *files]))
    for operator in sorted(set().union(*spent.values()), key=lambda op: -max(s[op] for s in spent.values())):
        print(" | ".join([operator, *(f"{spent[name][operator]:.2f}" for name in files)]))
    print(" | ".join(["total", *(f"{sum(spent[name].values()):.2f}" for name in files)]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=("onnx", "openvino"), default="onnx")
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--stem", default="0,2,4", help="the stem's convolutions kept in float, one conversion each")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--operators", default="qdq", help="onnx: qdq and/or qoperator, comma-separated")
    parser.add_argument("--by-operator", type=int, default=0, metavar="RUNS", help="onnx: profile each file")
    args = parser.parse_args()
    source = MODELS / "onnx" / "yolox_nano.onnx"
    engine = args.engine
    print(f"# {machine()}; {engine}; {args.frames} calibration and {args.frames} evaluation frames of {VTEST.name}")
    frames = calibration_frames(str(VTEST), None, args.frames, args.frames, progress=False)
    evaluation = list(Frames.decoded(frames.evaluation))
    floating = _loaded(source, engine, "yolox")
    tensors = [floating.prepare(frame).tensor.copy() for frame in Frames.decoded(frames.calibration)]
    probe = floating.prepare(evaluation[0]).tensor.copy()
    print("stem convolutions in float | operators | nodes in float | agreement | per class")
    formats = args.operators.split(",") if engine == "onnx" else ["nncf"]
    with tempfile.TemporaryDirectory() as folder:
        files = {"float": source}
        for convs, operators in ((int(k), f) for k in args.stem.split(",") for f in formats):
            target, record = quantized(engine, source, folder, tensors, convs, operators)
            int8 = _loaded(target, engine, "yolox")
            try:
                table = _table(*_judge(floating, int8, frames.evaluation), (1, 1))
            finally:
                int8.close()
            print(f"{convs} | {operators} | {len(record['kept_in_float'])} | {table['agreement_map50']} | "
                  f"{table['agreement_per_class']}", flush=True)  # fmt: skip
            files[f"int8 ({operators}), stem of {convs} convolutions in float"] = target
        floating.close()
        timed: dict[str, list[float]] = {name: [] for name in files}
        for _ in range(args.rounds):
            for name, path in files.items():
                timed[name].append(detector_cpu_ms(_loaded(path, engine, "yolox"), evaluation))
        medians = {name: statistics.median(values) for name, values in timed.items()}
        for name, value in medians.items():
            rounds = ", ".join(f"{v:.2f}" for v in timed[name])
            print(f"{name}: {value:.2f} ms CPU per frame (rounds {rounds}); / float {value / medians['float']:.3f}")
        if args.by_operator and engine == "onnx":
            print_by_operator(files, probe, args.by_operator, folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
