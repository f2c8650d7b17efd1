"""Response models the service adds to edge's own typed snapshots (`edge/runtime/snapshots.py`,
`edge/runtime/compare.py`, `edge/runtime/health.py`, `edge/tools/backends_report.py`), which routes declare directly:
the keys live in one place."""

from __future__ import annotations

from pydantic import BaseModel

from edge_inference.edge.runtime.health import StreamHealth


class UploadDetection(BaseModel):
    """A detection in one image, as `edge detect --json` prints it: an upload is never tracked."""

    label: str
    class_id: int
    score: float
    box: list[float]


class DetectionOut(UploadDetection):
    track_id: int | None = None  # present when the stream tracks objects and the box belongs to a track


class DetectResponse(BaseModel):
    source: str
    width: int
    height: int
    model: str
    backend: str
    detections: list[UploadDetection]
    timings_ms: dict[str, float]


class FrameEvent(BaseModel):
    """One processed frame: the data of each SSE `detections` event and each WebSocket message."""

    stream: str
    frame: int
    width: int
    height: int
    detections: list[DetectionOut]
    timing_ms: dict[str, float]  # captured_at (epoch s), then ms per stage: capture ... end_to_end


class LatestDetections(FrameEvent):
    age_s: float  # how old the frame is now


class Health(BaseModel):
    status: str  # live: alive | unsound; ready: ok | degraded | starting | down
    strict: bool = False
    streams: dict[str, StreamHealth] = {}
    problems: list[str] = []  # the service's own (events not stored), beside each stream's


class EventOut(BaseModel):
    """A tracked object's event: its lifecycle, where it went, and whether its best snapshot is kept."""

    id: str
    stream: str
    label: str
    track_id: int
    start: float  # seconds since the epoch
    end: float | None  # None while it goes on
    best_score: float
    zones: list[str]  # zones entered, in order
    lines: list[str]  # "line:in" / "line:out" per crossing, in order
    frames: int
    has_snapshot: bool


class EventPage(BaseModel):
    events: list[EventOut]  # newest first
    next: str | None  # pass as ?cursor= for the next page; None on the last page


class ServiceSetup(BaseModel):
    """What this service runs, so that a client asks only for what exists (the dashboard reads it first)."""

    streams: list[str]  # every pipeline's id: streams, and each compare member
    events: bool  # events are kept: /api/v1/events answers, the live channel carries their changes
    compare_groups: list[str]  # streams run through several backends: /api/v1/compare answers
    live: str  # the one channel a dashboard needs for all streams (Server-Sent Events)
