"""Options shared by every command that loads a detector."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from edge_inference.edge.config import MAX_THREADS, StreamConfig, classes_from_text
from edge_inference.edge.config.messages import fraction_as_percentage, number_as_written
from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.loader import DetectorConfig
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.runtime.plan import detector_config as plan_detector_config
from edge_inference.models.labels import Classes, labels_listed, unknown_classes
from edge_inference.models.registry import DEFAULT_MODEL

F = Callable[..., Any]


class FractionType(click.FloatRange):
    """0 to 1, answered as a config is for `0,5` (a decimal comma), `50%` and `50` (a percentage)."""

    def __init__(self) -> None:
        super().__init__(0, 1)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                self.fail(number_as_written(value, "") or f"{value!r} is not a number", param, ctx)
        said = fraction_as_percentage(number)
        if said:
            self.fail(said, param, ctx)
        return super().convert(value, param, ctx)


FRACTION = FractionType()


def detector_options(func: F) -> F:
    options: list[Callable[[F], F]] = [
        click.option(
            "--model",
            "-m",
            default=DEFAULT_MODEL,
            show_default=True,
            help="Registry name (see `edge models list`), model file, or a model on a Triton server: "
            "triton://HOST:PORT/NAME (HTTP), triton+grpc://HOST:PORT/NAME (gRPC).",
        ),
        click.option(
            "--backend",
            "-b",
            default="auto",
            show_default=True,
            help="Engine: onnx, tflite, edgetpu, openvino, hailo, rknn, triton; auto: the fastest one measured here "
            "(triton for a model on a server).",
        ),
        click.option(
            "--device",
            "-d",
            default="auto",
            show_default=True,
            help="Device for the engine, e.g. cpu, cuda:0, tensorrt (onnx); CPU, GPU, NPU, AUTO (openvino).",
        ),
        click.option("--fallback", is_flag=True, help="If the device is unavailable, run on the CPU and say so."),
        engine_option_flag(),
        click.option(
            "--threads",
            type=click.IntRange(min=1, max=MAX_THREADS),
            help="Engine threads (default: the machine's usable cores, shared among the engines loaded).",
        ),
        click.option("--conf", type=FRACTION, default=0.25, show_default=True, help="Minimum score."),
        click.option("--iou", type=FRACTION, default=0.45, show_default=True, help="NMS IoU threshold."),
        classes_flag(),
        click.option(
            "--decoder",
            help="Output decoder if the layout is not recognised: yolox, yolov5, yolov8, yolo-end2end, ssd, nanodet, "
            "yolov8-rknn.",
        ),
        click.option("--color", type=click.Choice(["RGB", "BGR"]), help="Channel order the model expects."),
        click.option("--resize", type=click.Choice(["letterbox", "stretch"]), help="Resize mode."),
        labels_flag(),
        click.option(
            "--isolation",
            type=click.Choice(["auto", "process", "thread"]),
            default="auto",
            show_default=True,
            help="Where the engine runs: a process of its own (a native crash ends that process, not this one) or "
            "this one; auto: its own for accelerators and plugin engines.",
        ),
        click.option(
            "--load-timeout",
            "load_timeout_s",
            type=click.FloatRange(min=0, min_open=True),
            default=900,
            show_default=True,
            help="Seconds an engine in a process of its own may take to load the model before it is killed.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def home_expanded(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """`~/out` quoted, or passed by a script: no shell expanded it, and nothing after this would."""
    return None if value is None else value.expanduser()


def labels_flag() -> Callable[[F], F]:
    flag: Callable[[F], F] = click.option(
        "--labels", type=click.Path(dir_okay=False), help="Label file: one name per line, or 'id name'."
    )
    return flag


def classes_flag() -> Callable[[F], F]:
    flag: Callable[[F], F] = click.option(
        "--classes",
        metavar="NAMES",
        callback=_classes,
        help="Report only these classes: labels or class ids, comma-separated (person,car or 0,2).",
    )
    return flag


def _classes(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str | int]:
    return classes_from_text([value or ""])


def check_classes(detector: Detector, classes: Classes) -> None:
    """--classes naming a class the model does not have: one line with the nearest label, not an empty answer."""
    labels = detector.spec.labels
    unknown = unknown_classes(labels, classes)
    if unknown:
        shown = labels_listed(list(labels.values()))
        raise EdgeError(
            f"--classes names {', '.join(unknown)}, which {detector.spec.name} does not detect; its classes: {shown}"
        )


def engine_option_flag() -> Callable[[F], F]:
    flag: Callable[[F], F] = click.option(
        "--engine-option",
        "engine_option",
        multiple=True,
        metavar="ENGINE.KEY=VALUE",
        callback=_engine_options,
        help="An engine's own option, e.g. onnx.trt_fp16=false (repeatable; `edge backends` lists them).",
    )
    return flag


def _engine_options(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """`onnx.trt_fp16=false` -> {"onnx": {"trt_fp16": False}}; the value read as YAML (true, 3, LATENCY)."""
    blocks: dict[str, dict[str, Any]] = {}
    for item in values:
        name, equals, value = item.partition("=")
        engine, dot, key = name.partition(".")
        if not (equals and dot and engine and key):
            raise click.BadParameter(f"{item!r}: write ENGINE.KEY=VALUE, e.g. onnx.trt_fp16=false")
        blocks.setdefault(engine, {})[key] = yaml.safe_load(value) if value else None
    return blocks


def detector_config(kwargs: dict[str, Any]) -> DetectorConfig:
    """The model flags read as one stream's settings and built by the one builder a config's streams go through
    (`runtime/plan.py`): a key a config takes is taken the same way from a flag. A command is a loop of frames
    back to back (a camera's engine waits between frames), so it measures its threads."""
    flags = {key: kwargs.pop(flag, None) for flag, key in FLAG_KEYS.items()}  # a caller of its own may leave some out
    stream = {key: value for key, value in flags.items() if value is not None and value != ()}
    try:
        config = StreamConfig.model_validate({"id": "cli", "source": "-", **stream})
    except ValidationError as exc:
        raise EdgeError("; ".join(_as_flag(error) for error in exc.errors())) from None
    return replace(plan_detector_config(config), back_to_back=True)


def _as_flag(error: ErrorDetails) -> str:
    """A stream key's mistake said as the flag that set it (an engine's option names itself: `engine option ...`)."""
    said = str(error["msg"]).removeprefix("Value error, ")
    key = str(error["loc"][0]) if error["loc"] else ""
    flag = next((flag for flag, named in FLAG_KEYS.items() if named == key), key)
    if key == "engine_options":
        return said.replace("engine_options names", "--engine-option names")
    return f"--{flag.replace('_', '-')}: {said}"


# `edge detect`'s model flags, by the stream key each one sets
FLAG_KEYS = {
    "model": "model",
    "backend": "backend",
    "device": "device",
    "conf": "conf",
    "iou": "iou",
    "classes": "classes",
    "threads": "threads",
    "fallback": "fallback",
    "decoder": "decoder",
    "color": "color",
    "resize": "resize",
    "labels": "labels",
    "engine_option": "engine_options",
    "isolation": "isolation",
    "load_timeout_s": "load_timeout_s",
}
