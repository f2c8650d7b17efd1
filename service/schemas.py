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
