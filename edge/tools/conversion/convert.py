"""`edge models convert`: a float model made int8 for this device with the vendor's own tool, calibrated on the
user's own camera, then judged on other frames of it by the vendor's runtime against the float model (agreement,
CPU per frame, size), and kept in the model cache with a record of what it was made from.

The converted file lands in `<model cache>/converted/` as NAME-int8 (ONNX Runtime) or NAME-openvino-int8 (OpenVINO
IR), with two files beside it: the spec sidecar (`.yaml`, the float model's decoder, so the int8 file reads as the
float one does) and the record (`.json`). It is written under a temporary name and renamed once converted and
judged, so a failure leaves nothing half-written.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np
import yaml

from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.detection.model_files import converted_folder, locate_model, model_for_engine
from edge_inference.edge.detection.timings import process_cpu_seconds
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.secrets import mask_url
from edge_inference.edge.settings import Settings
from edge_inference.edge.tools.conversion.calibration import Frames, calibration_frames, other_footage, shortfalls
from edge_inference.edge.tools.conversion.quantize import (
    DEFAULT_METHOD,
    input_shape,
    onnx_int8,
    openvino_int8,
    quantised_ops,
)
from edge_inference.edge.tools.conversion.split_head import SPLIT_DECODER, splittable
from edge_inference.edge.tools.conversion.toolchain_convert import rknn_int8, tflite_int8
from edge_inference.edge.tools.conversion.toolchains import ONNX2TF, RKNN_TOOLKIT, toolchain_can_be_made
from edge_inference.edge.tools.conversion.verdict import judged_on, ratio_interval, verdict
from edge_inference.edge.tools.folders import drop_leftovers, ensure_writable
from edge_inference.edge.tools.progress import shown_progress
from edge_inference.extras import install_extra
from edge_inference.models.agreement import ENOUGH_BOXES, agreement
from edge_inference.models.decoders import get_decoder
from edge_inference.models.detection import Detection
from edge_inference.models.download import sha256_of
from edge_inference.models.overrides import SpecOverrides, load_sidecar, sidecar_path
from edge_inference.models.spec import ModelSpec

# target -> (engine that runs it, file ending, name suffix)
TARGETS = {
    "onnx-int8": ("onnx", ".onnx", "-int8"),
    "openvino-int8": ("openvino", ".xml", "-openvino-int8"),
    "rknn": ("rknn", ".rknn", "-PLATFORM"),  # NAME-rk3588: the board it was made for
    "tflite-int8": ("tflite", ".tflite", "-tflite-int8"),  # full integer: what the Edge TPU compiler takes
}
ELSEWHERE = {
    "hailo": "Hailo's Dataflow Compiler is behind Hailo's developer login (hailo.ai, Developer Zone): compile a HEF "
    "there and give it to --backend hailo",
}
# what each target's own side needs in the service's environment (the toolchains' environments are made on demand)
# (onnx reads every source first: one already quantised is refused)
NEEDS = {"onnx": ("onnx", "sympy"), "openvino": ("nncf", "openvino", "onnx"), "rknn": ("onnx",), "tflite": ("onnx",)}
TOOLCHAIN_OF = {"rknn": RKNN_TOOLKIT, "tflite": ONNX2TF}  # the targets made in a toolchain's environment of its own
EXTRA_OF = {"openvino": "openvino"}  # the extra that installs a module NEEDS names; the rest come with `convert`
# The float model's boxes at its usual threshold are the truth; the int8 model's are scored down to this score, as mAP
# is computed (ranked, COCO's evaluation goes down to 0.001): a box the float model gives 0.26 and the int8 0.24 is
# then a lower-ranked match, not a missed class
CANDIDATE_CONF = 0.05
REFERENCE_CONF = 0.25  # the float model's boxes kept as truth: the service's default threshold
# the converted file, its partial copy and the toolchains' intermediate files (ONNX Runtime's pre-processed and
# upgraded graphs): about this many times the float model's size
ROOM_FACTOR = 6
OUT_OF_MEMORY = ("bad_alloc", "Failed to allocate memory", "Insufficient memory", "out of memory")
TIMED_BLOCK = 8  # evaluation frames alternate between the two models in blocks of this many


@dataclass
class Judged:
    """One model on the evaluation frames."""

    cpu_ms: float
    fps: float
    detections: list[list[Detection]] = field(default_factory=list)
    block_cpu: list[float] = field(default_factory=list)  # CPU seconds of each alternating block (`_judge`)


@dataclass
class Converted:
    name: str
    path: Path
    record: dict[str, Any]


def _known_target(target: str) -> tuple[str, str, str]:
    if target in TARGETS:
        return TARGETS[target]
    if target in ELSEWHERE:
        raise EdgeError(f"--to {target}: {ELSEWHERE[target]}")
    raise EdgeError(f"--to {target} is no target; choose one of: {', '.join([*TARGETS, *ELSEWHERE])}")


def _installed_for(target: str, engine: str) -> None:
    """Said before minutes of reading footage, not after."""
    missing = [module for module in NEEDS.get(engine, ()) if importlib.util.find_spec(module) is None]
    if missing:
        extras = ",".join(dict.fromkeys(EXTRA_OF.get(module, "convert") for module in missing))
        raise EdgeError(f"--to {target} needs {' and '.join(missing)}, not installed here: {install_extra(extras)}")


def _asked_sensibly(target: str, engine: str, suffix: str, output: Path | None, split_head: bool | None) -> None:
    """The options that contradict the target, and a library it needs that is missing: said before any footage is
    read."""
    if split_head is not None and engine != "rknn":
        raise EdgeError(
            f"--split-head and --no-split-head are for --to rknn only (Rockchip's layout), not --to {target}"
        )
    if output is not None and output.suffix != suffix:  # the engine finds a model by its ending
        raise EdgeError(f"--output {output.name}: --to {target} writes a {suffix} file; give a name ending in {suffix}")
    _installed_for(target, engine)


def _starts_from(model: str, engine: str) -> str:
    """The engine whose float file the conversion starts from: ONNX, which every vendor's tool reads; for
    openvino-int8 an OpenVINO IR given as a file too (NNCF quantises it as it is: a user of OpenVINO may have no
    ONNX export of it)."""
    return "openvino" if engine == "openvino" and model.lower().endswith(".xml") else "onnx"


def _writable(folder: Path, asked: bool) -> None:
    """The converted file's folder, made; refused before any footage is read where this user cannot write there (as
    a unit's own user, `--output` in a folder of root's ended the calibration in `unexpected PermissionError`)."""
    try:
        ensure_writable(folder)
    except OSError as exc:
        where = "give --output a folder" if asked else "set EDGE_MODEL_CACHE to a folder, or give --output one,"
        reason = exc.strerror or type(exc).__name__
        raise EdgeError(
            f"cannot write the converted model in {folder} ({reason}): {where} this user can write"
        ) from None


def _room_for(source: Path, folder: Path) -> None:
    """Refuse before minutes of work where the converted file cannot be written: it, its partial copy and the
    toolchains' intermediate files take about ROOM_FACTOR times the float model's size."""
    need = sum(path.stat().st_size for path in _files(source) if path.exists()) * ROOM_FACTOR
    free = shutil.disk_usage(folder).free
    if free < need:
        raise EdgeError(
            f"converting {source.name} needs about {need / 2**20:.0f} MiB free in {folder} ({free / 2**20:.0f} MiB "
            "free): free some space, or give --output on another disk"
        )


def _convertible(source: Path) -> None:
    """A float model of one size: one int8 already, or one whose image size is left open, is refused before any
    footage is read (an open batch is set to 1 by each target)."""
    already = quantised_ops(source)
    if already:
        raise EdgeError(f"{source.name} is quantised already ({already}): convert the model's float export instead")
    shape = input_shape(source)
    if any(not isinstance(side, int) for side in shape[1:]):
        raise EdgeError(
            f"{source.name} has a dynamic input size {shape}: export it with a fixed size to convert it "
            "(Ultralytics: dynamic=False)"
        )


def _out_of_memory(failed: BaseException) -> bool:
    """Python's MemoryError, or an engine's allocation failure as ONNX Runtime and OpenCV word it."""
    said = str(failed)
    return isinstance(failed, MemoryError) or any(sign in said for sign in OUT_OF_MEMORY)


def _files(path: Path) -> list[Path]:
    """The file and what goes with it: an IR's weights."""
    return [path, path.with_suffix(".bin")] if path.suffix == ".xml" else [path]


def _judge(float_detector: Detector, int8_detector: Detector, frames: list[bytes]) -> tuple[Judged, Judged]:
    """Both models on the same frames (JPEG, decoded a block at a time), in alternating blocks so a busy moment falls
    on both alike."""
    judged = (Judged(0.0, 0.0), Judged(0.0, 0.0))
    cpu, wall = [0.0, 0.0], [0.0, 0.0]
    for start in range(0, len(frames), TIMED_BLOCK):
        block = list(Frames.decoded(frames[start : start + TIMED_BLOCK]))
        sides = list(enumerate((float_detector, int8_detector)))
        # the first of a block pays for touching its frames first: each model goes first in every other block
        for side, detector in sides if start // TIMED_BLOCK % 2 == 0 else sides[::-1]:
            cpu0, wall0 = process_cpu_seconds(), time.perf_counter()
            judged[side].detections.extend(detector.detect(frame).detections for frame in block)
            judged[side].block_cpu.append(process_cpu_seconds() - cpu0)
            cpu[side] += judged[side].block_cpu[-1]
            wall[side] += time.perf_counter() - wall0
        del block  # before the next is decoded: two 4K blocks at once are 400 MB
    for side in (0, 1):
        judged[side].cpu_ms = cpu[side] * 1e3 / len(frames)
        judged[side].fps = len(frames) / wall[side]
    return judged


def _table(floating: Judged, int8: Judged, sizes: tuple[int, int]) -> dict[str, Any]:
    """Size, CPU per frame and fps of each; agreement as the project's mAP@0.5 over the classes the float model found
    ENOUGH_BOXES times or more (a class seen once or twice, often the float model's own stray box, says little of
    the conversion and weighs as much as people in a class mean), and over every class it found, for the record."""
    floating.detections = [[d for d in frame if d.score >= REFERENCE_CONF] for frame in floating.detections]
    agreed = agreement(floating.detections, int8.detections)
    counts = agreed.boxes
    enough = {label: ap for label, ap in agreed.per_class.items() if counts[label] >= ENOUGH_BOXES}
    interval = ratio_interval(floating.block_cpu, int8.block_cpu) if int8.block_cpu else None

    def side(judged: Judged, size: int) -> dict[str, float]:
        return {
            "size_mib": round(size / 2**20, 2),
            "cpu_ms_per_frame": round(judged.cpu_ms, 2),
            "fps": round(judged.fps, 1),
        }

    return {
        "float": side(floating, sizes[0]),
        "int8": side(int8, sizes[1]),
        "agreement_map50": round(float(np.mean(list(enough.values()))), 3) if enough else None,
        "agreement_per_class": {label: round(ap, 3) for label, ap in enough.items()},
        "agreement_map50_every_class": None if (every := agreed.map50_every_class) is None else round(every, 3),
        "agreement_every_class": {
            label: {"ap": round(ap, 3), "boxes": counts.get(label, 0)} for label, ap in agreed.per_class.items()
        },
        "cpu_ratio": round(int8.cpu_ms / floating.cpu_ms, 3) if floating.cpu_ms else None,
        # the ratio's 95% interval over the alternating blocks: the verdict turns on it, not on the figure alone
        "cpu_ratio_interval": None if interval is None else [round(bound, 3) for bound in interval],
    }


def convert(
    model: str,
    target: str,
    calibrate: str,
    settings: Settings,
    *,
    evaluate: str | None = None,
    output: Path | None = None,
    method: str = DEFAULT_METHOD,
    counts: tuple[int, int] = (100, 100),
    progress: bool = True,
    platform: str = "rk3588",
    split_head: bool | None = None,
) -> Converted:
    engine, suffix, name_suffix = _known_target(target)
    _asked_sensibly(target, engine, suffix, output, split_head)
    name_suffix = name_suffix.replace("PLATFORM", platform)
    float_model, reason = model_for_engine(model, _starts_from(model, engine))
    if float_model is None:
        raise EdgeError(f"{reason}: conversion starts from the float ONNX model (openvino-int8 from its IR too)")
    stem, source = locate_model(float_model, settings)
    name = stem + name_suffix  # a registry name's, or the file's stem
    target_path = output or converted_folder(settings) / f"{name}{suffix}"
    _writable(target_path.parent, asked=output is not None)
    drop_leftovers(target_path.parent)  # a conversion killed mid-way left its partial files and work folder there
    _room_for(source, target_path.parent)
    _convertible(source)
    if engine in TOOLCHAIN_OF:  # its environment made where it is not yet: GBs, said before any footage is read
        toolchain_can_be_made(TOOLCHAIN_OF[engine], settings)
    split_head = engine == "rknn" and splittable(source, split_head)
    evaluate, notes = other_footage(calibrate, evaluate)
    frames = calibration_frames(calibrate, evaluate, *counts, progress=progress)
    # its own partial name: a second conversion of the same model in flight (another terminal, another camera) has one
    partial = target_path.with_name(f".{target_path.stem}.{os.getpid()}.partial{suffix}")
    try:
        record = _make(source, partial, engine, frames, (method, platform, split_head, settings), progress)
        record = _recorded(record, (model, source, target, target_path), frames, evaluate)
        record["notes"] = notes + shortfalls(frames, counts)
        spec = SpecOverrides(decoder=record.pop("decoder"), **record.pop("sidecar"))  # a .rknn names no input size
        float_sidecar = sidecar_path(source)
        spec = (load_sidecar(float_sidecar) if float_sidecar else SpecOverrides()).merged(spec)
        _land(partial, target_path, yaml.safe_dump(spec.model_dump(exclude_none=True)), json.dumps(record, indent=2))
    except BaseException as failed:
        for path in (*_files(partial), Path(f"{partial}.yaml"), Path(f"{partial}.json")):
            path.unlink(missing_ok=True)
        if _out_of_memory(failed):
            raise EdgeError(
                f"converting {source.name} ran out of memory with {len(frames.calibration)} calibration frames: give "
                "fewer --frames, or convert on a machine with more memory"
            ) from None
        raise
    return Converted(target_path.name.removesuffix(suffix), target_path, record)


def _recorded(
    record: dict[str, Any], made: tuple[str, Path, str, Path], frames: Frames, evaluate: str | None
) -> dict[str, Any]:
    """The toolchain's record with what the file was made from and judged on, and the verdict. `made`: the model
    as asked for, its float file, the target and where the converted file lands."""
    model, source, target, target_path = made
    if target == "tflite-int8":
        record["edgetpu"] = edgetpu_command(target_path)
    record.update(made_from={"model": model, "file": source.name, "sha256": sha256_of(source)}, target=target)
    if source.suffix == ".xml":  # an IR's weights are in its .bin
        record["made_from"]["weights_sha256"] = sha256_of(source.with_suffix(".bin"))
    record["calibration"] = {
        "source": mask_url(frames.source),
        "frames": len(frames.calibration),
        "method": record.pop("calibration_method"),
        "source_frames_read": frames.read,
        "frames_with_motion": frames.moving,  # half the frames are drawn over those where something moved
    }
    record["evaluation"] = {
        "source": mask_url(evaluate or frames.source),
        "frames": len(frames.evaluation),
        "frames_are": "the second half of the source" if evaluate is None else "another source",
    }
    record["judged_on"] = judged_on()
    record["verdict"] = verdict(record["table"], record["judged_on"])
    return record


def _land(partial: Path, target: Path, sidecar: str, record: str) -> None:
    """The converted files renamed into place, the sidecar and the record first: the model is never there without
    the decoder its sidecar names (without it, `edge serve --model NAME-int8` would guess one)."""
    for ending, text in ((".yaml", sidecar), (".json", record)):
        written = Path(f"{partial}{ending}")
        written.write_text(text, encoding="utf-8")
        written.replace(f"{target}{ending}")
    for done, final in zip(_files(partial), _files(target), strict=True):
        done.replace(final)


def _make(
    source: Path, partial: Path, engine: str, frames: Frames, how: tuple[str, str, bool, Settings], progress: bool
) -> dict[str, Any]:
    """Converted to `partial` and judged there: the record's toolchain, decoder and table. `how`: the calibration
    method (onnx-int8), the target platform and whether the head is split (rknn), and the settings (where a
    toolchain lives)."""
    method, platform, split_head, settings = how
    # both decode down to CANDIDATE_CONF, so their CPU per frame is like for like; the float's truth is then cut
    # the float ONNX model, on its own engine where the int8 one runs there; else on ONNX Runtime (an NPU that is not
    # here, a toolchain that judges its own float twin: its spec and pixels)
    reference = engine if engine in ("onnx", "openvino") else "onnx"
    config = DetectorConfig(str(source), backend=reference, threads=1, back_to_back=False, conf=CANDIDATE_CONF)
    float_detector = load_detector(config)
    try:
        spec = float_detector.spec
        if engine == "rknn":
            done, found = rknn_int8(float_detector, source, partial, frames, (platform, split_head, settings))
            floating = _timed(float_detector, frames.evaluation)
            judged = (floating, Judged(0.0, 0.0, found))
        elif engine == "tflite":
            float_tflite = tflite_int8(float_detector, source, partial, frames, settings)
            done = {"toolchain": {"name": ONNX2TF.name, "version": ONNX2TF.version}}
            done["calibration_method"] = "onnx2tf's full-integer quantisation (per channel)"
            try:
                judged = _judged_on(engine, float_tflite, partial, spec.decoder, frames.evaluation)
            finally:
                shutil.rmtree(float_tflite.parent, ignore_errors=True)
        else:
            done = _quantized(float_detector, source, partial, engine, frames, method, progress)
            int8_detector = _loaded(partial, engine, spec.decoder)
            try:
                judged = _judge(float_detector, int8_detector, frames.evaluation)
            finally:
                int8_detector.close()
    finally:
        float_detector.close()
    sizes = (
        sum(p.stat().st_size for p in _files(source) if p.exists()),
        sum(p.stat().st_size for p in _files(partial)),
    )
    table = _table(*judged, sizes)
    if engine == "rknn":  # the simulator's time says nothing of the NPU's
        table["int8"].update(cpu_ms_per_frame=None, fps=None)
        table["cpu_ratio"] = None
    decoder = SPLIT_DECODER if split_head else spec.decoder
    return {**done, "decoder": decoder, "engine": engine, "table": table, "sidecar": _sidecar(engine, spec, decoder)}


def _sidecar(engine: str, spec: ModelSpec, decoder: str) -> dict[str, Any]:
    """What the converted file's sidecar says beside its decoder: a .rknn names no input size; another decoder
    than the float model's (the split head's) gets the float model's pre-processing where its own defaults differ
    (Ultralytics letterboxes with grey 114, the zoo with black)."""
    pre = spec.preprocessing
    said: dict[str, Any] = {"width": pre.width, "height": pre.height} if engine == "rknn" else {}
    if decoder != spec.decoder:
        defaults = get_decoder(decoder).preprocessing
        said |= {key: getattr(pre, key) for key, value in defaults.items() if getattr(pre, key) != value}
    return said


def _loaded(path: Path, engine: str, decoder: str) -> Detector:
    """A model on `engine` as the judge runs it: one thread, scored down to CANDIDATE_CONF, the float's decoder."""
    config = DetectorConfig(
        str(path), backend=engine, threads=1, back_to_back=False, conf=CANDIDATE_CONF,
        overrides=SpecOverrides(decoder=decoder),
    )  # fmt: skip
    return load_detector(config)


def _judged_on(engine: str, floating: Path, int8: Path, decoder: str, frames: list[bytes]) -> tuple[Judged, Judged]:
    """The float and int8 files of one toolchain, both on `engine` (LiteRT for onnx2tf's pair)."""
    float_detector, int8_detector = _loaded(floating, engine, decoder), _loaded(int8, engine, decoder)
    try:
        return _judge(float_detector, int8_detector, frames)
    finally:
        float_detector.close()
        int8_detector.close()


def edgetpu_command(path: Path) -> str:
    """The Edge TPU compiler's command for a full-integer file (Coral's, x86-64 Debian; not reachable here)."""
    return (
        f"edgetpu_compiler -s -o {path.parent} {path} (apt install edgetpu-compiler from Coral's repository), then "
        f"`edge models verify {path.with_name(path.stem + '_edgetpu.tflite')}`"
    )


class Prepared(Sequence[np.ndarray]):
    """The calibration frames as the pipeline's input tensors, each made when the calibrator asks for it: made all
    at once they took 4.7 MiB each for a 640 model (100 frames: 470 MiB, --frames 1000: 4.6 GiB) before the
    calibrator held anything."""

    def __init__(self, detector: Detector, jpegs: list[bytes]) -> None:
        self._detector, self._jpegs = detector, jpegs

    def __len__(self) -> int:
        return len(self._jpegs)

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, index: slice) -> list[np.ndarray]: ...

    def __getitem__(self, index: int | slice) -> np.ndarray | list[np.ndarray]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        (image,) = Frames.decoded([self._jpegs[index]])
        return self._detector.prepare(image).tensor.copy()


def _quantized(
    float_detector: Detector, source: Path, partial: Path, engine: str, frames: Frames, method: str, progress: bool
) -> dict[str, Any]:
    tensors = Prepared(float_detector, frames.calibration)
    bar = shown_progress(len(tensors), f"calibrating ({engine})", "frame", progress)
    step: Callable[[], None] = bar.update
    with bar:
        if engine == "onnx":
            return onnx_int8(source, partial, tensors, method, step)
        return openvino_int8(source, partial, tensors, step)


def _timed(detector: Detector, frames: list[bytes]) -> Judged:
    """One model on the frames (JPEG), decoded a block at a time outside the timing."""
    judged, cpu, wall = Judged(0.0, 0.0), 0.0, 0.0
    for start in range(0, len(frames), TIMED_BLOCK):
        block = list(Frames.decoded(frames[start : start + TIMED_BLOCK]))
        cpu0, wall0 = process_cpu_seconds(), time.perf_counter()
        judged.detections.extend(detector.detect(frame).detections for frame in block)
        cpu, wall = cpu + process_cpu_seconds() - cpu0, wall + time.perf_counter() - wall0
        del block
    judged.cpu_ms, judged.fps = cpu * 1e3 / len(frames), len(frames) / wall
    return judged
