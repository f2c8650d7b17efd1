"""A config compiled once into plans, before anything opens: each stream's pipelines (the stream itself, or each
engine it compares, on that engine's own file of the model), each with the detector it loads: the model, engine,
device, thresholds, classes and the engine's typed options, its references checked. The service (`streams.py`) and
`edge serve --check` (`check.py`) read the plans; neither goes back to the config to decide these again."""

from __future__ import annotations

from dataclasses import dataclass

from edge_inference.edge.config import ServiceConfig, StreamConfig, compare_member_ids, compared
from edge_inference.edge.detection.loader import DetectorConfig, check_reference
from edge_inference.edge.detection.model_files import model_for_engine
from edge_inference.models.overrides import SpecOverrides

EngineKey = tuple[str, str, str, int | None]  # model, engine, device, threads: what the thread budget counts


@dataclass(frozen=True)
class PipelinePlan:
    """One pipeline: a stream, or one engine a stream compares (`door-onnx`)."""

    id: str
    stream: StreamConfig  # its settings: a compare member's are its stream's with its own model, engine and device
    detector: DetectorConfig  # what its detector loads
    problem: str | None = None  # why it cannot run here (a compared engine with no file of the model)

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


def compile_streams(config: ServiceConfig, check: bool = True) -> tuple[StreamPlan, ...]:
    """Every stream's plan. With `check`, each pipeline's model and engine names are checked now (a typo is one
    line before any source opens); `edge serve --check` reports them per stream instead."""
    plans = []
    for stream in config.streams:
        members = compare_members(stream) if stream.compare else [(stream, None)]
        pipelines = tuple(PipelinePlan(m.id, m, detector_config(m), problem) for m, problem in members)
        if check:
            for pipeline in pipelines:
                if pipeline.problem is None:
                    check_reference(pipeline.detector)
        plans.append(StreamPlan(stream, pipelines))
    return tuple(plans)


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
        overrides=SpecOverrides(labels=str(stream.labels) if stream.labels else None, color=stream.color),
        # a camera's engine waits between frames, and a file's lanes run one thread each: nothing to spin for
        back_to_back=False,
    )


def compare_members(stream: StreamConfig) -> list[tuple[StreamConfig, str | None]]:
    """Each engine a stream compares, as a stream of its own (`door-onnx`, `door-openvino`) on that engine's file of
    the model, with why there is none (the stream's model is kept then)."""
    members = []
    for item, member_id in zip(stream.compare, compare_member_ids(stream.id, stream.compare), strict=True):
        backend, device, given = compared(item)  # the config has checked the engine's name
        model, reason = model_for_engine(given or stream.model, backend)
        update = {"id": member_id, "model": model or stream.model, "backend": backend, "compare": []}
        member = stream.model_copy(update={**update, "device": device or stream.device})
        members.append((member, None if model else reason))
    return members
