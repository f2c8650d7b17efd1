"""Typed views of the running streams, taken on request: what the service turns into its responses.

Each is a plain dataclass of figures (the service declares them as response models, so the OpenAPI document
describes them); nothing here runs or changes a stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from edge_inference.edge.compare import CompareSnapshot
from edge_inference.edge.pipeline import StreamPipeline
from edge_inference.edge.stats import Percentiles, StreamFigures
from edge_inference.edge.streams import StreamManager


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
class StreamLoad(StreamFigures):
    """A stream's figures with what the service adds: its state and its slow subscribers' drops."""

    subscriber_drops: int = 0
    state: str = ""
    error: str | None = None


@dataclass
class BackendLoad:
    streams: list[str] = field(default_factory=list)
    fps_processed: float = 0.0
    inference_ms: dict[str, Percentiles] = field(default_factory=dict)  # by stream


@dataclass(frozen=True)
class ServiceStats:
    streams: dict[str, StreamLoad]
    backends: dict[str, BackendLoad]  # by "backend/device"


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
        )
        detector = pipeline.detector
        key = f"{detector.backend.key}/{detector.backend.device}" if detector else pipeline.names.backend
        load = by_backend.setdefault(key, BackendLoad())
        load.streams.append(stream_id)
        load.fps_processed = round(load.fps_processed + figures.fps_processed, 2)
        load.inference_ms[stream_id] = figures.latency_ms["inference"]
    return ServiceStats(streams, by_backend)


def compare_snapshots(manager: StreamManager) -> list[CompareSnapshot]:
    return [group.snapshot() for group in manager.groups.values()]
