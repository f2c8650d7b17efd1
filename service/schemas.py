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
    ready: bool
    last_error: str | None
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


class Health(BaseModel):
    status: str
    streams: dict[str, str] = {}
