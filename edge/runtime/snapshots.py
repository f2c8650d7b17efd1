"""Typed views of the running streams, taken on request: what the service turns into its responses.

Each is a plain dataclass of figures (the service declares them as response models, so the OpenAPI document
describes them); nothing here runs or changes a stream.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from edge_inference.edge.detection.detector_pool import DetectorFigures, describe_engine
from edge_inference.edge.detection.timings import Percentiles
from edge_inference.edge.runtime.compare import CompareSnapshot
from edge_inference.edge.runtime.cpu import CpuFigures
from edge_inference.edge.runtime.streams import StreamManager
from edge_inference.edge.stream.pipeline import StreamPipeline
from edge_inference.edge.stream.stats import StreamFigures


@dataclass(frozen=True)
class StreamSummary:
    id: str
    source: str
    group: str | None  # the compare group this stream belongs to
    mode: str  # live (newest frame only) or file (every frame in order)
    model: str
    backend: str
    device: str | None  # None until the detector has loaded
    engine: str | None  # the engine and its version, once loaded
    notes: list[str]  # what the backend chose for itself (fallbacks, providers)
    state: str
    state_since: float  # seconds since the epoch
    ready: bool  # the detector is loaded
    error: str | None  # what is wrong now; None while frames flow
    last_error: str | None  # kept after recovery, with its time
    last_error_at: float | None
    frame_age_s: float | None
    fps: float
    subscribers: int


@dataclass(frozen=True)
class ZoneFigures:
    objects: dict[str, int]  # label -> tracked objects in the zone on the newest frame
    track_ids: list[int]
    longest_dwell_s: float  # of the objects in it now


@dataclass(frozen=True)
class LineFigures:
    crossed_in: int  # since the stream started
    crossed_out: int


@dataclass(frozen=True)
class StreamLoad(StreamFigures):
    """A stream's figures with what the service adds: its state, its slow subscribers' drops, its zones and lines."""

    subscriber_drops: int = 0
    state: str = ""
    error: str | None = None
    zones: dict[str, ZoneFigures] = field(default_factory=dict)
    lines: dict[str, LineFigures] = field(default_factory=dict)


@dataclass(frozen=True)
class EventFigures:
    recorded: int  # event changes stored since start
    lost: int  # changes not stored (disk full or too slow, no writable data folder); live listeners still got them
    outbox: dict[str, dict[str, int]]  # per destination: waiting, dropped
    mqtt_connected: bool | None  # None when no broker is configured
    last_error: str | None
    storage_problem: str | None = None  # why events are not being stored now
    storage_notice: str | None = None  # what opening the store took: a damaged database moved aside


@dataclass
class BackendLoad:
    streams: list[str] = field(default_factory=list)
    fps_processed: float = 0.0
    inference_ms: dict[str, Percentiles] = field(default_factory=dict)  # by stream


@dataclass(frozen=True)
class ServiceStats:
    streams: dict[str, StreamLoad]
    backends: dict[str, BackendLoad]  # by "backend/device"
    events: EventFigures | None = None  # when events or MQTT are configured
    detectors: list[DetectorFigures] = field(default_factory=list)  # loaded engines, each serving its streams
    cpu: CpuFigures | None = None  # the service's CPU per frame (kernel's count, FFmpeg decoders included)


def stream_summary(manager: StreamManager, pipeline: StreamPipeline) -> StreamSummary:
    detector, health = pipeline.detector, pipeline.health()
    return StreamSummary(
        id=pipeline.stream_id,
        source=pipeline.names.source,
        group=manager.group_of(pipeline),
        mode=pipeline.mode,
        model=detector.spec.name if detector else pipeline.names.model,
        backend=detector.backend.key if detector else pipeline.names.backend,
        device=detector.backend.device if detector else None,
        engine=detector.backend.engine if detector else None,
        notes=list(detector.backend.notes) if detector else [],
        state=health.state,
        state_since=health.since,
        ready=pipeline.ready,
        error=health.error,
        last_error=health.last_error,
        last_error_at=health.last_error_at,
        frame_age_s=health.frame_age_s,
        fps=pipeline.stats.fps_processed(),
        subscribers=pipeline.results.subscribers,
    )


def stream_summaries(manager: StreamManager) -> list[StreamSummary]:
    return [stream_summary(manager, p) for p in manager.pipelines.values()]


def service_stats(manager: StreamManager) -> ServiceStats:
    streams: dict[str, StreamLoad] = {}
    by_backend: dict[str, BackendLoad] = {}
    for stream_id, pipeline in manager.pipelines.items():
        figures = pipeline.stats.snapshot()
        streams[stream_id] = StreamLoad(
            **{name: getattr(figures, name) for name in StreamFigures.__dataclass_fields__},
            subscriber_drops=pipeline.results.dropped,
            state=pipeline.state,
            error=pipeline.error,
            zones=zone_figures(pipeline),
            lines=line_figures(pipeline),
        )
        detector = pipeline.detector
        key = f"{detector.backend.key}/{detector.backend.device}" if detector else pipeline.names.backend
        load = by_backend.setdefault(key, BackendLoad())
        load.streams.append(stream_id)
        load.fps_processed = round(load.fps_processed + figures.fps_processed, 2)
        load.inference_ms[stream_id] = figures.latency_ms["inference"]
    detectors = [describe_engine(engine) for engine in manager.detectors.engines()]
    return ServiceStats(streams, by_backend, event_figures(manager), detectors, cpu_figures(manager, streams.values()))


def cpu_figures(manager: StreamManager, figures: Iterable[StreamFigures]) -> CpuFigures:
    """The service's CPU per frame handled (inferred, or skipped as still by motion gating), from every stream's
    figures as the caller has just read them."""
    return manager.cpu.read(sum(f.frames_processed + f.frames_still for f in figures))


def zone_figures(pipeline: StreamPipeline) -> dict[str, ZoneFigures]:
    zones = pipeline.latest.zones if pipeline.latest else ()
    return {z.name: ZoneFigures(z.objects, sorted(z.track_ids), z.longest_dwell_s) for z in zones}


def line_figures(pipeline: StreamPipeline) -> dict[str, LineFigures]:
    lines = pipeline.latest.lines if pipeline.latest else ()
    return {line.name: LineFigures(line.crossed_in, line.crossed_out) for line in lines}


def event_figures(manager: StreamManager) -> EventFigures | None:
    layer = manager.events
    if not layer.active:
        return None
    recorder, mqtt = layer.recorder, layer.mqtt
    errors = [e for e in (recorder and recorder.last_error, *(sink.last_error for sink in layer.sinks)) if e]
    outbox = layer.outbox_counts() or {}  # a stalled or damaged store: the figures it can give, none of its own
    for sink in layer.sinks:  # refused for good (a webhook's 4xx): skipped, not retried
        outbox.setdefault(sink.sink, {"waiting": 0, "dropped": 0})["rejected"] = sink.rejected
    return EventFigures(
        recorded=recorder.recorded if recorder else 0,
        lost=recorder.lost if recorder else 0,
        outbox=outbox,
        mqtt_connected=mqtt.connected.is_set() if mqtt else None,
        last_error=errors[0] if errors else None,
        storage_problem=layer.problem,
        storage_notice=layer.storage_notice,
    )


def compare_snapshots(manager: StreamManager) -> list[CompareSnapshot]:
    return [group.snapshot() for group in manager.groups.values()]
