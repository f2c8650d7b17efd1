"""Response models, so the OpenAPI document describes what clients get."""

from __future__ import annotations

from pydantic import BaseModel


class StreamInfo(BaseModel):
    id: str
    source: str
    group: str | None  # the compare group this stream belongs to
    mode: str
    model: str
    backend: str
    device: str | None
    engine: str | None
    notes: list[str]
    state: str
    state_since: float  # seconds since the epoch
    ready: bool
    error: str | None  # what is wrong now; None while frames flow
    last_error: str | None  # kept after recovery, with its time
    last_error_at: float | None
    frame_age_s: float | None
    fps: float
    subscribers: int


class DetectionOut(BaseModel):
    label: str
    class_id: int
    score: float
    box: list[float]


class DetectResponse(BaseModel):
    source: str
    width: int
    height: int
    model: str
    backend: str
    detections: list[DetectionOut]
    timings_ms: dict[str, float]


class StreamHealth(BaseModel):
    state: str
    since: float
    up: bool
    fps: float
    error: str | None
    last_error: str | None
    last_error_at: float | None
    frame_age_s: float | None
    detector_restarts: int
    stalls: int
    workers_alive: bool


class Health(BaseModel):
    status: str  # live: alive | unsound; ready: ok | degraded | starting
    strict: bool = False
    streams: dict[str, StreamHealth] = {}


class Percentiles(BaseModel):
    p50: float
    p95: float
    p99: float


class StreamFigures(BaseModel):
    fps_in: float
    fps_processed: float
    fps_dropped: float
    frames_in: int
    frames_processed: int
    frames_dropped: int
    errors: int
    reconnects: int
    stalls: int
    restarts: int
    load_failures: int
    latency_ms: dict[str, Percentiles]  # by stage: capture, queue_wait, preprocess, inference, postprocess, end_to_end
    window_frames: int  # recent frames the percentiles cover
    subscriber_drops: int
    state: str
    error: str | None


class BackendFigures(BaseModel):
    streams: list[str]
    fps_processed: float
    inference_ms: dict[str, Percentiles] = {}  # by stream


class Stats(BaseModel):
    streams: dict[str, StreamFigures]
    backends: dict[str, BackendFigures]  # by "backend/device"


class Agreement(BaseModel):
    reference: str
    frames: int  # frames both processed, over which mAP@0.5 is computed
    map50: float | None


class CompareRow(BaseModel):
    stream: str
    backend: str
    device: str | None
    model: str
    state: str
    fps_processed: float
    fps_dropped: float
    latency_ms: dict[str, Percentiles]  # inference and end_to_end
    agreement: Agreement


class CompareGroupFigures(BaseModel):
    group: str
    source: str
    backends: list[CompareRow]


class BackendInfo(BaseModel):
    key: str
    available: bool
    engine: str | None
    devices: list[str]
    problem: str | None  # why it cannot run here, with the fix
    install: str
    formats: list[str]
    models: list[str]  # registry models it can run
