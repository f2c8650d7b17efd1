"""int8 conversions of yolox-nano calibrated on the shared video, judged against the float model (issue 59).

    python -m benchmarks.convert [--frames 100] [--rounds 3] [--only onnx-int8,openvino-int8] [--model yolox-nano]

`edge models convert yolox-nano --to TARGET --calibrate vtest.avi` for each target (onnx-int8, openvino-int8, rknn,
tflite-int8): calibrated on frames spread over the video's first half, judged on frames spread over its second half.
Printed per target: the conversion's own table (agreement with the float model over the classes it found 10 times
or more, and over every class), then CPU per frame of the int8 model and the float one on the same engine, one
thread, timed again here over `--rounds` alternating passes of the evaluation frames (the process's CPU time from
the kernel). Targets: agreement >= 0.90; CPU per frame int8 / float <= 0.80 on ONNX Runtime and <= 0.70 on
OpenVINO. On OpenVINO the float model also runs at f32 precision (`openvino.precision: f32`): on a CPU with AVX-512
BF16 OpenVINO's default runs a float model in bf16. `rknn` and `tflite-int8` (where their toolchains' environments
are made) are judged by the conversion itself: rknn on Rockchip's simulator (agreement only), tflite-int8 against
onnx2tf's float32 twin on LiteRT (one thread, alternating blocks). `--model`: another registry name or a float
ONNX file (a YOLOv8/YOLO11 export's head is split for rknn as rknn_model_zoo splits it; a float YOLOv8n is made from
the shared int8 one by `tests/float_yolov8n.py`).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from benchmarks.common import VTEST, machine
from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.detection.model_files import locate_model, model_for_engine
from edge_inference.edge.detection.timings import process_cpu_seconds
from edge_inference.edge.settings import Settings
from edge_inference.edge.tools.conversion.calibration import Frames, calibration_frames
from edge_inference.edge.tools.conversion.convert import TARGETS, convert
from edge_inference.edge.tools.conversion.toolchains import ONNX2TF, RKNN_TOOLKIT, toolchain_ready

GOALS = {"onnx-int8": 0.80, "openvino-int8": 0.70}


def cpu_ms(model: str, engine: str, frames: list, options: dict | None = None) -> float:
    detector = load_detector(
        DetectorConfig(model, backend=engine, threads=1, back_to_back=False, engine_options=options or {})
    )
    return detector_cpu_ms(detector, frames)


def detector_cpu_ms(detector: Detector, frames: list) -> float:
    """CPU per frame over `frames` (the process's, from the kernel), after five to warm up; the detector closed."""
    try:
        for frame in frames[:5]:
            detector.detect(frame)
        start = process_cpu_seconds()
        for frame in frames:
            detector.detect(frame)
        return (process_cpu_seconds() - start) * 1e3 / len(frames)
    finally:
        detector.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(TARGETS), help="comma-separated targets")
    parser.add_argument("--model", default="yolox-nano", help="a registry name or a float ONNX file")
    args = parser.parse_args()
    print(f"# {machine()}; {args.frames} calibration and {args.frames} evaluation frames of {VTEST.name}")
    evaluation = list(Frames.decoded(calibration_frames(str(VTEST), None, args.frames, args.frames).evaluation))
    with tempfile.TemporaryDirectory() as cache:
        settings = Settings(model_cache=Path(cache))
        for target in args.only.split(","):
            engine = TARGETS[target][0]
            one_target(target, engine, settings, evaluation, args)
    return 0


def one_target(target: str, engine: str, settings: Settings, evaluation: list, args: argparse.Namespace) -> None:
    toolchain = {"rknn": RKNN_TOOLKIT, "tflite": ONNX2TF}.get(engine)
    if toolchain is not None and not toolchain_ready(toolchain, settings):
        print(f"\n## {target}: skipped, {toolchain.name}'s environment is not made (convert --to {target})")
        return
    done = convert(args.model, target, str(VTEST), settings, counts=(args.frames, args.frames), progress=False)
    table = done.record["table"]
    floated = done.record.get("kept_in_float")
    kept = f"; {len(floated)} nodes in float: the stem and the head" if floated is not None else ""
    head = f"; head {done.record['head']}" if "head" in done.record else ""
    print(f"\n## {target} of {args.model} ({done.record['toolchain']}{kept}{head})")
    print(f"convert's own table: float {table['float']}, int8 {table['int8']}")
    print(f"agreement (classes seen >= 10 times) {table['agreement_map50']}: {table['agreement_per_class']}")
    print(f"agreement (every class) {table['agreement_map50_every_class']}: {table['agreement_every_class']}")
    agreed = table["agreement_map50"] or 0.0
    verdict = "met" if agreed >= 0.90 else "MISSED"
    if toolchain is not None:  # judged by convert itself: rknn on Rockchip's simulator, tflite on LiteRT
        speed = "on the board" if engine == "rknn" else f"int8 / float {table['cpu_ratio']} (side by side)"
        print(f"agreement {agreed} (target >= 0.90: {verdict}); speed: {speed}")
        return
    medians = timed_again(engine, float_file(args.model, settings), str(done.path), evaluation, args.rounds)
    ratio = medians["int8"] / medians["float"]
    met = "met" if ratio <= GOALS[target] else "MISSED"
    print(f"int8 / float CPU per frame {ratio:.3f} (target <= {GOALS[target]}: {met}); agreement {agreed} "
          f"(target >= 0.90: {verdict})")  # fmt: skip
    if "float f32" in medians:
        print(f"int8 / float at f32 precision {medians['int8'] / medians['float f32']:.3f}")


def float_file(model: str, settings: Settings) -> str:
    """The float ONNX file a conversion of `model` starts from (a registry name's, from the mirror)."""
    onnx_model, reason = model_for_engine(model, "onnx")
    assert onnx_model is not None, reason
    return str(locate_model(onnx_model, settings)[1])


def timed_again(engine: str, float_file: str, int8_file: str, evaluation: list, rounds: int) -> dict[str, float]:
    """CPU per frame of the float and int8 files (and the float at f32 on OpenVINO), alternating, the medians."""
    variants: dict[str, tuple[str, dict]] = {"float": (float_file, {}), "int8": (int8_file, {})}
    if engine == "openvino":
        variants["float f32"] = (float_file, {"openvino": {"precision": "f32"}})
    figures: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (model, options) in variants.items():
            figures[name].append(cpu_ms(model, engine, evaluation, options))
    medians = {name: statistics.median(values) for name, values in figures.items()}
    for name, value in medians.items():
        print(f"{name:<10} {value:6.2f} ms CPU/frame (rounds {', '.join(f'{v:.2f}' for v in figures[name])})")
    return medians


if __name__ == "__main__":
    raise SystemExit(main())
