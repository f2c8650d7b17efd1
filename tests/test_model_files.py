"""A model reference is read once (`model_files.resolve_model`), into what a stream's plan holds; the loader, auto
and the opening work from that and never resolve the name again (issue 61)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from edge_inference.edge.config import ServiceConfig, StreamConfig
from edge_inference.edge.detection import opening
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.detection.model_files import every_engine, resolve_model
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.runtime.plan import compile_streams
from tests.conftest import MEDIA, MODELS


def _refusing(calls: list[Any]) -> Callable[..., Any]:
    def resolve(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        raise AssertionError(f"the model was resolved again: {args}")

    return resolve


@pytest.mark.parametrize("backend", ["onnx", "tflite", "auto"])
def test_the_plan_resolves_the_model_once_and_the_loader_only_opens_it(backend: str, monkeypatch):
    # auto by the ranking: a machine that never measured it would start timing children, which this tier may not
    monkeypatch.setenv("EDGE_AUTO_MEASURE", "0")
    stream = StreamConfig(id="cam", source=str(MEDIA / "vtest.avi"), model="yolox-nano", backend=backend)
    ((pipeline,),) = (plan.pipelines for plan in compile_streams(ServiceConfig(streams=[stream])))
    files = pipeline.files
    assert files is not None
    if backend != "auto":  # the engine's own file of the family, decided in the plan
        assert set(files.engines) == {backend}
        assert files.engines[backend].reference == {"onnx": "yolox-nano", "tflite": "yolox-nano-tflite"}[backend]
    calls: list[Any] = []
    monkeypatch.setattr(opening, "resolve_model", _refusing(calls))
    detector = load_detector(pipeline.detector, files=files)
    try:
        assert detector.backend.key in files.engines and not calls
    finally:
        detector.close()


def test_a_family_name_without_a_model_of_that_name_runs_on_auto(monkeypatch):
    """`yolov8n-int8` names a family (an ONNX and a TFLite file) and no file of that name: with `--backend auto` it
    failed as an unknown registry name before any engine was ranked."""
    monkeypatch.setenv("EDGE_AUTO_MEASURE", "0")  # the ranking's choice: the reference itself is what it ranks
    files = every_engine("yolov8n-int8")
    assert files.given.reference.startswith("yolov8n-int8-") and {"onnx", "tflite"} <= set(files.engines)
    detector = load_detector(DetectorConfig("yolov8n-int8"))
    try:
        assert detector.backend.key in {"onnx", "tflite", "openvino"}
    finally:
        detector.close()


def test_a_named_engine_that_cannot_read_the_file_is_told_before_anything_loads():
    tflite = next((MODELS / "tflite").glob("yolox_nano*.tflite"))
    with pytest.raises(EdgeError, match=rf"onnx reads \.onnx files, not {tflite.name}"):
        resolve_model(str(tflite), ["onnx"], strict=True)
    refused = resolve_model(str(tflite), ["onnx", "tflite"])  # auto's view: the one that reads it is its candidate
    assert set(refused.engines) == {"tflite"} and "onnx" in refused.refused


def test_nothing_in_a_compiled_plan_or_the_config_it_came_from_can_be_changed():
    """A plan compiled once is what every stream runs: its stream's settings, its detector's classes and engine
    options, its model's files, and the loaded config they came from are read-only all the way down (a pydantic
    model's `frozen` guards its fields, not the lists and dicts in them)."""
    import dataclasses

    from pydantic import ValidationError

    config = ServiceConfig.model_validate(
        {
            "streams": [
                {
                    "id": "door",
                    "source": "door.mp4",
                    "model": str(MODELS / "onnx/yolox_nano.onnx"),
                    "backend": "onnx",
                    "classes": {"person": 0.5},
                    "engine_options": {"onnx": {"trt_fp16": False}},
                    "zones": [{"name": "porch", "polygon": [[0, 0], [0.5, 0], [0.5, 0.5]]}],
                    "compare": ["openvino"],
                }
            ]
        }
    )
    (plan,) = compile_streams(config)
    pipeline = plan.pipelines[0]
    attempts = [
        lambda: setattr(plan.stream, "conf", 0.9),
        lambda: setattr(config.streams[0].zones[0], "name", "gate"),
        lambda: config.streams.append(config.streams[0]),
        lambda: plan.stream.compare.append("tflite"),
        lambda: plan.stream.zones[0].polygon.append((1.0, 1.0)),
        lambda: plan.stream.classes.__setitem__("car", 0.1),
        lambda: plan.stream.engine_options.pop("onnx"),
        lambda: setattr(pipeline, "detector", None),
        lambda: setattr(pipeline.detector, "conf", 0.9),
        lambda: pipeline.detector.classes.__setitem__("car", 0.1),
        lambda: pipeline.detector.engine_options.clear(),
        lambda: pipeline.files.engines.__setitem__("tflite", None),
        lambda: plan.pipelines[-1].stream.compare.append("tflite"),  # a compared engine's: a copy, as read-only
        lambda: plan.pipelines[-1].stream.zones.pop(),
    ]
    for attempt in attempts:
        with pytest.raises((TypeError, AttributeError, ValidationError, dataclasses.FrozenInstanceError)):
            attempt()
    assert plan.stream.conf == 0.25 and "car" not in pipeline.detector.classes and pipeline.files is not None


def test_a_streams_config_and_the_command_line_say_the_same_of_a_model_through_one_reading():
    """`--decoder` and `--resize` were the command line's alone: a stream could not name the decoder of a model of
    its own. Both now read what they say of a model in one place, and the config refuses a decoder it has not."""
    from edge_inference.cli.options import detector_config as from_flags
    from edge_inference.edge.runtime.plan import detector_config as from_stream

    stream = StreamConfig(
        id="door", source="door.mp4", decoder="yolox", resize="stretch", color="BGR", labels="/tmp/labels.txt"
    )
    flags = {"model": "yolox-nano", "backend": "auto", "device": "auto", "conf": 0.25, "iou": 0.45, "classes": (),
             "threads": None, "fallback": False, "engine_option": {}, "decoder": "yolox", "color": "BGR",
             "resize": "stretch", "labels": "/tmp/labels.txt"}  # fmt: skip
    assert from_stream(stream).overrides == from_flags(flags).overrides
    assert from_stream(stream).overrides.decoder == "yolox" and from_stream(stream).overrides.resize == "stretch"
    with pytest.raises(ValueError, match="decoder 'yolo' is not one of yolox"):
        StreamConfig(id="door", source="door.mp4", decoder="yolo")
