"""A config compiled once into plans, before anything opens: each stream's pipelines (the stream itself, or each
engine it compares, on that engine's own file of the model), each with the detector it loads: the model, engine,
device, thresholds, classes and the engine's typed options, and the model reference resolved once (`ModelFiles`:
which file each engine opens, nothing downloaded yet). The service (`streams.py`) and `edge serve --check`
(`check.py`) read the plans; neither goes back to the config, nor the loader to the model's name, to decide these
again."""

from __future__ import annotations

from dataclasses import dataclass

from edge_inference.backends import BackendError
from edge_inference.edge.config import ServiceConfig, StreamConfig, compare_member_ids, compared
from edge_inference.edge.detection.loader import DetectorConfig, check_reference
from edge_inference.edge.detection.model_files import ModelFiles
from edge_inference.edge.detection.opening import spec_overrides
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import Settings
from edge_inference.models.errors import ModelError

EngineKey = tuple[str, str, str, int | None]  # model, engine, device, threads: what the thread budget counts


@dataclass(frozen=True)
class PipelinePlan:
    """One pipeline: a stream, or one engine a stream compares (`door-onnx`)."""

    id: str
    stream: StreamConfig  # its settings: a compare member's are its stream's with its own model, engine and device
    detector: DetectorConfig  # what its detector loads
    problem: str | None = None  # why it cannot run here (a compared engine with no file of the model)
    files: ModelFiles | None = None  # the model resolved for its engine (every engine, with auto); None unchecked

    @property
    def engine_key(self) -> EngineKey:
        return (self.stream.model, self.stream.backend, self.stream.device, self.stream.threads)


@dataclass(frozen=True)
class StreamPlan:
    stream: StreamConfig
    pipelines: tuple[PipelinePlan, ...]  # the stream's own, or one per compared engine

    @property
    def compared(self) -> bool:
        return bool(self.stream.compare)


def compile_streams(
    config: ServiceConfig, check: bool = True, settings: Settings | None = None
) -> tuple[StreamPlan, ...]:
    """Every stream's plan. With `check`, each pipeline's model, engine, options and labels are checked now (a typo
    is one line before any source opens) and the model resolved for the loader; `edge serve --check` reports them
    per stream instead. A compared engine that cannot run the model is that member's `problem`."""
    plans = []
    for stream in config.streams:
        members = compare_members(stream) if stream.compare else [stream]
        compares = bool(stream.compare)
        plans.append(StreamPlan(stream, tuple(_pipeline(m, compares, check, settings) for m in members)))
    return tuple(plans)


def _pipeline(member: StreamConfig, compares: bool, check: bool, settings: Settings | None) -> PipelinePlan:
    detector = detector_config(member)
    if not (check or compares):
        return PipelinePlan(member.id, member, detector)
    try:
        files = check_reference(detector, settings)
    except (EdgeError, ModelError, BackendError) as exc:
        if not compares:
            raise
        return PipelinePlan(member.id, member, detector, problem=str(exc))
    if compares:  # the member shows and loads the engine's own file of the model (`door-tflite`: yolox-nano-tflite)
        file = files.engines[member.backend]
        member = member.model_copy(update={"model": file.reference})
        detector = detector_config(member)
    return PipelinePlan(member.id, member, detector, files=files)


def detector_config(stream: StreamConfig) -> DetectorConfig:
    return DetectorConfig(
        model=stream.model,
        backend=stream.backend,
        device=stream.device,
        conf=stream.conf,
        iou=stream.iou,
        classes=stream.class_scores,
        threads=stream.threads,
        allow_fallback=stream.fallback,
        engine_options=stream.engine_options,
        isolation=stream.isolation,
        load_timeout_s=stream.load_timeout_s,
        # motion regions fall back to tiles for the frames that run whole (the first, and now and then)
        tiling=None if stream.regions.mode == "full" else stream.regions.tiling(),
        overrides=spec_overrides(stream.decoder, stream.color, stream.resize, stream.labels),
        # a camera's engine waits between frames, and a file's lanes run one thread each: nothing to spin for
        back_to_back=False,
    )


def compare_members(stream: StreamConfig) -> list[StreamConfig]:
    """Each engine a stream compares, as a stream of its own (`door-onnx`, `door-openvino`), on the model it names
    or the stream's; `_pipeline` resolves it to that engine's own file."""
    members = []
    for item, member_id in zip(stream.compare, compare_member_ids(stream.id, stream.compare), strict=True):
        backend, device, given = compared(item)  # the config has checked the engine's name
        update = {"id": member_id, "model": given or stream.model, "backend": backend, "compare": []}
        members.append(stream.model_copy(update={**update, "device": device or stream.device}))
    return members
