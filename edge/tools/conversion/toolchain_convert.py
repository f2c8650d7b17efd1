"""`edge models convert --to rknn|tflite-int8`: the service's side of conversions whose toolchain runs in an
environment of its own (`toolchains.py`). The float ONNX model's own pre-processing makes the pixels (letterboxed
uint8 in the model's colour order, as the engine on the device feeds them).

- rknn: rknn-toolkit2 (`rknn_build.py`) quantises on the calibration pixels and runs the `.rknn` on Rockchip's
  simulator on the evaluation pixels; the float model's decoder reads those outputs here, as on the board (or, for a
  YOLOv8/YOLO11 head split the zoo's way by `split_head.py`, the `yolov8-rknn` decoder), and ONNX Runtime runs the
  float model on the same frames for the agreement.
- tflite-int8: onnx2tf with TensorFlow (`tflite_build.py`) writes the full-integer model (the Edge TPU compiler's
  input) and a float32 one; LiteRT here runs both on the evaluation frames, as `edge detect --backend tflite` does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import Settings
from edge_inference.edge.tools.conversion.calibration import Frames
from edge_inference.edge.tools.conversion.quantize import float_subgraphs, input_shape, onnx_batch_of_one
from edge_inference.edge.tools.conversion.split_head import SPLIT_DECODER, SPLIT_RECORD, split_yolov8_head, splittable
from edge_inference.edge.tools.conversion.toolchains import ONNX2TF, RKNN_TOOLKIT, toolchain_python
from edge_inference.models.decoders import get_decoder
from edge_inference.models.decoders.base import DecodeContext
from edge_inference.models.detection import Detection
from edge_inference.models.preprocess import Preprocessor
from edge_inference.models.transform import ImageTransform

PLATFORMS = ("rk3588", "rk3576", "rk3566", "rk3568", "rk3562")
BUILD = Path(__file__).with_name("rknn_build.py")
TFLITE_BUILD = Path(__file__).with_name("tflite_build.py")
RKNN_MAX_OPSET = 19  # rknn-toolkit2 2.5.0's load_onnx: "Unsupport onnx opset 20, need <= 19!"
BUILD_TIMEOUT_S = 3600  # a large model's build on a slow PC; the simulator's runs after it


def rknn_int8(
    float_detector: Detector,
    source: Path,
    partial: Path,
    frames: Frames,
    how: tuple[str, bool, Settings],
) -> tuple[dict[str, Any], list[list[Detection]]]:
    """`partial` made from `source` for the platform, and its detections on the evaluation frames (the simulator's
    outputs, decoded as the board decodes them): (the record's toolchain part, detections per frame). `how`: the
    target platform, whether the head is split the zoo's way (split_head.py), the settings."""
    platform, split, settings = how
    if platform not in PLATFORMS:
        raise EdgeError(f"--target-platform {platform} is not one of {', '.join(PLATFORMS)}")
    pre = float_detector.spec.preprocessing
    pixels = _pixels_preprocessor(float_detector)
    with tempfile.TemporaryDirectory(prefix="edge-rknn-") as folder:
        work = Path(folder)
        source, subgraphs = _rknn_input(source, work, split)
        decode = _split_decoding(float_detector) if split else float_detector.decode
        python = toolchain_python(RKNN_TOOLKIT, settings, _say)
        dataset = work / "dataset.txt"
        # one frame at a time (the toolkit reads .npy dataset entries, in the ONNX input's NCHW), none held after
        for index, image in enumerate(Frames.decoded(frames.calibration)):
            calibration = _pixels(pixels, image)[0]
            np.save(work / f"calibration{index}.npy", np.ascontiguousarray(calibration.transpose(0, 3, 1, 2)))
        dataset.write_text("".join(f"{work / f'calibration{i}.npy'}\n" for i in range(len(frames.calibration))))
        evaluation = [_pixels(pixels, image) for image in Frames.decoded(frames.evaluation)]
        named: dict[str, Any] = {f"frame{i}": tensor for i, (tensor, _) in enumerate(evaluation)}
        np.savez(work / "evaluate.npz", **named)
        results = work / "outputs.npz"
        command = [str(python), str(BUILD), "--onnx", str(source), "--platform", platform, "--dataset", str(dataset)]
        command += ["--mean", _listed(pre.mean), "--std", _listed(pre.std), "--output", str(partial)]
        command += ["--evaluate", str(work / "evaluate.npz"), "--results", str(results)]
        kept = work / "float16.json"
        kept.write_text(json.dumps(subgraphs))
        try:
            _run([*command, "--float-subgraphs", str(kept)], "rknn-toolkit2", cwd=work)
        except EdgeError as failed:
            if split or not splittable(source, None):
                raise
            raise EdgeError(f"{failed}; this YOLOv8/YOLO11 head converts split: leave out --no-split-head") from None
        with np.load(results) as found:
            detections = [decode(_outputs(found, index), transform) for index, (_, transform) in enumerate(evaluation)]
    toolchain = {"name": RKNN_TOOLKIT.name, "version": RKNN_TOOLKIT.version, "target_platform": platform}
    record = {"toolchain": toolchain, "runs_on": "Rockchip's simulator (x86-64): time it on the board"}
    if split:
        record["head"] = SPLIT_RECORD
    method = "rknn-toolkit2's hybrid quantisation (w8a8, weights per channel; the stem and the head in float16)"
    return record | {"calibration_method": method, "kept_in_float16": subgraphs}, detections


def _split_decoding(float_detector: Detector) -> Callable[[list[np.ndarray], ImageTransform], list[Detection]]:
    """The split outputs read by the `yolov8-rknn` decoder, on the float model's input and reporting, as the
    board's engine reads them (the converted file's sidecar names that decoder)."""
    spec = replace(float_detector.spec, decoder=SPLIT_DECODER)
    decoder, own = get_decoder(SPLIT_DECODER), float_detector.reporting()

    def decode(outputs: list[np.ndarray], transform: ImageTransform) -> list[Detection]:
        return decoder.decode(outputs, DecodeContext(spec, transform, own.conf, own.iou, own.max_detections))

    return decode


def _rknn_input(source: Path, work: Path, split: bool) -> tuple[Path, list[list[str]]]:
    """The ONNX file rknn-toolkit2 reads (split the zoo's way if asked, at an opset it takes), and what Rockchip's
    hybrid quantisation keeps in float16 there: the stem and the head, for the reason the other int8 targets keep
    them in float (quantize.py). Without it yolox-nano's int8 agreed 0.646 with the float model on the shared video
    (one int8 tensor carries both its boxes and its scores), with it 0.943. onnx is there: `convert` checks a
    target's libraries before it reads any footage."""
    import onnx
    from onnx import version_converter

    model = onnx.load(str(source))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), RKNN_MAX_OPSET)
    open_batch = not isinstance(input_shape(source)[0], int)  # rknn-toolkit2 refuses one ("fix the input shape")
    if not split and opset <= RKNN_MAX_OPSET and not open_batch:
        return source, float_subgraphs(model)
    model = onnx_batch_of_one(model)
    if split:
        model = split_yolov8_head(model)
    if opset > RKNN_MAX_OPSET:  # Ultralytics' recent exports are opset 20
        model = version_converter.convert_version(model, RKNN_MAX_OPSET)
    made = work / f"{source.stem}-rknn.onnx"
    onnx.save(model, str(made))
    return made, float_subgraphs(model)


def tflite_int8(float_detector: Detector, source: Path, partial: Path, frames: Frames, settings: Settings) -> Path:
    """`partial` (full-integer int8) and, returned, onnx2tf's float32 file of the same graph (in a folder beside it,
    removed by the caller): the two the judge runs on LiteRT."""
    python = toolchain_python(ONNX2TF, settings, _say)
    pre = float_detector.spec.preprocessing
    pixels = _pixels_preprocessor(float_detector)
    work = partial.with_name(f".{partial.stem}.onnx2tf")
    work.mkdir(parents=True, exist_ok=True)
    calibration = [_pixels(pixels, image)[0][0] for image in Frames.decoded(frames.calibration)]
    np.save(work / "calibration.npy", np.stack(calibration).astype(np.float32) / 255.0)  # onnx2tf wants 0..1
    mean, std = (np.asarray(v, np.float64) / 255.0 for v in (pre.mean, pre.std))
    command = [str(python), str(TFLITE_BUILD), "--onnx", str(source), "--calibration", str(work / "calibration.npy")]
    command += ["--mean", _listed(tuple(mean)), "--std", _listed(tuple(std)), "--output", str(work)]
    made = {kind: work / f"{source.stem}_{kind}.tflite" for kind in ("full_integer_quant", "float32")}
    try:
        _run(command, "onnx2tf")
        missing = [path.name for path in made.values() if not path.is_file()]
        if missing:
            raise EdgeError(f"onnx2tf wrote no {', '.join(missing)}")
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)  # nothing half-made stays in the cache
        raise
    made["full_integer_quant"].replace(partial)
    return made["float32"]


def _say(line: str) -> None:
    """A long step's line (a toolchain's environment being made): progress, on stderr beside the bars."""
    print(line, file=sys.stderr, flush=True)


def _pixels_preprocessor(float_detector: Detector) -> Preprocessor:
    pre = float_detector.spec.preprocessing
    return Preprocessor(replace(pre, layout="NHWC", mean=(0.0,) * 3, std=(1.0,) * 3), np.dtype(np.uint8), None)


def _pixels(pixels: Preprocessor, image: np.ndarray) -> tuple[np.ndarray, ImageTransform]:
    tensor, transform = pixels(image)
    kept = tensor.copy()
    pixels.release(tensor)
    return kept, transform


def _outputs(found: Any, index: int) -> list[np.ndarray]:
    names = sorted((n for n in found.files if n.startswith(f"frame{index}_")), key=lambda n: int(n.rsplit("_", 1)[1]))
    return [found[name] for name in names]


def _listed(values: tuple[float, ...]) -> str:
    return ",".join(f"{value:g}" for value in values)


def _run(command: list[str], toolchain: str, cwd: Path | None = None) -> None:
    """The build in the toolchain's interpreter (in `cwd`, where it writes what it keeps between its steps); its
    failure one line."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise EdgeError(f"{toolchain} did not finish within {BUILD_TIMEOUT_S} s") from None
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        last = errors[-1][6:].strip() if errors else (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EdgeError(f"{toolchain} failed: {last}")
