"""Routes of /api/v1. Thin: every handler calls edge/ objects held by the app."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, Response, StreamingResponse
from sse_starlette.event import ServerSentEvent
from sse_starlette.sse import EventSourceResponse

from edge.backends_report import backends_report
from edge.drawing import render_jpeg
from edge.images import ImageError, decode_image
from edge.pipeline import FrameResult, StreamPipeline
from edge.report import result_record
from edge.streams import StreamManager
from service.schemas import DetectResponse, Health, StreamInfo
from service.uploads import UploadDetectors

router = APIRouter()
BOUNDARY = "frame"


def manager_of(request: Request | WebSocket) -> StreamManager:
    manager: StreamManager = request.app.state.manager
    return manager


def pipeline_of(request: Request | WebSocket, stream_id: str) -> StreamPipeline:
    pipeline = manager_of(request).pipelines.get(stream_id)
    if pipeline is None:
        known = ", ".join(manager_of(request).pipelines)
        raise HTTPException(404, f"no stream {stream_id!r}; streams: {known}")
    return pipeline


def latest_or_503(pipeline: StreamPipeline) -> FrameResult:
    if pipeline.latest is None:
        detail = f"stream {pipeline.stream_id} has no processed frame yet (state: {pipeline.state})"
        if pipeline.last_error:
            detail += f"; last error: {pipeline.last_error}"
        raise HTTPException(503, detail)
    return pipeline.latest


@router.get("/streams", response_model=list[StreamInfo], summary="Streams with their source, model and state")
def list_streams(request: Request) -> list[dict[str, Any]]:
    manager = manager_of(request)
    return [manager.summary(p) for p in manager.pipelines.values()]


@router.get("/streams/{stream_id}/detections/latest", summary="The newest frame's detections and timing")
def latest_detections(request: Request, stream_id: str) -> Response:
    return Response(latest_or_503(pipeline_of(request, stream_id)).payload, media_type="application/json")


async def _batches(request: Request | WebSocket, pipeline: StreamPipeline) -> AsyncIterator[list[FrameResult]]:
    """Results in order, in batches of whatever accumulated while the client was busy."""
    server = request.app.state.config.server
    subscription = pipeline.results.subscribe(server.subscriber_buffer)
    period = 1.0 / server.client_flush_hz
    try:
        while batch := await subscription.batch():
            sent = time.monotonic()
            yield batch
            # Above the flush rate, gather events instead of paying a write per client per frame.
            await asyncio.sleep(max(0.0, sent + period - time.monotonic()))
    finally:
        pipeline.results.unsubscribe(subscription)


def _sse_bytes(result: FrameResult) -> bytes:
    encoded = result.encoded.get("sse")
    if encoded is None:
        encoded = ServerSentEvent(data=result.payload, event="detections", id=str(result.index)).encode()
        result.encoded["sse"] = encoded
    return encoded


@router.get("/streams/{stream_id}/events", summary="Server-Sent Events: one 'detections' event per processed frame")
async def events(request: Request, stream_id: str) -> EventSourceResponse:
    pipeline = pipeline_of(request, stream_id)

    async def generate() -> AsyncIterator[bytes]:
        async for batch in _batches(request, pipeline):
            yield b"".join(_sse_bytes(r) for r in batch)  # encoded once per frame, one write per batch

    # A client that stops reading is disconnected after send_timeout; until then only its own buffer fills.
    return EventSourceResponse(generate(), ping=15, send_timeout=30)


@router.websocket("/streams/{stream_id}/ws")
async def websocket_stream(websocket: WebSocket, stream_id: str) -> None:
    pipeline = manager_of(websocket).pipelines.get(stream_id)
    if pipeline is None:
        await websocket.close(code=4404, reason=f"no stream {stream_id!r}")
        return
    await websocket.accept()
    try:
        async for batch in _batches(websocket, pipeline):
            for result in batch:
                await websocket.send_text(result.payload)
    except (WebSocketDisconnect, RuntimeError):
        return


def _jpeg(result: FrameResult, height: int | None, quality: int, boxes: bool) -> bytes:
    key = ("jpeg", height, quality, boxes)
    encoded = result.encoded.get(key)
    if encoded is None:  # clients watching with the same settings share one encoding per frame
        encoded = render_jpeg(result.image, result.detections, height=height, quality=quality, boxes=boxes)
        result.encoded[key] = encoded
    return encoded


Height = Annotated[int | None, Query(ge=16, le=4320, description="Scale frames down to this height")]
Quality = Annotated[int, Query(ge=10, le=100)]


@router.get("/streams/{stream_id}/snapshot.jpg", summary="The newest processed frame as JPEG")
async def snapshot(
    request: Request, stream_id: str, height: Height = None, quality: Quality = 80, boxes: bool = True
) -> Response:
    result = latest_or_503(pipeline_of(request, stream_id))
    data = await asyncio.to_thread(_jpeg, result, height, quality, boxes)
    return Response(data, media_type="image/jpeg", headers={"Cache-Control": "no-store"})


@router.get("/streams/{stream_id}/video.mjpg", summary="Annotated MJPEG (multipart/x-mixed-replace)")
async def mjpeg(
    request: Request,
    stream_id: str,
    fps: Annotated[float, Query(gt=0, le=60)] = 10,
    height: Height = None,
    quality: Quality = 70,
    boxes: bool = True,
) -> StreamingResponse:
    pipeline = pipeline_of(request, stream_id)
    interval = 1.0 / fps

    async def generate() -> AsyncIterator[bytes]:
        subscription = pipeline.results.subscribe(2)
        try:
            next_at = 0.0
            while True:
                result = await subscription.newest()
                if result is None:
                    return
                now = time.monotonic()
                if now < next_at:
                    continue  # faster than the asked-for rate: skip this frame
                next_at = now + interval
                data = await asyncio.to_thread(_jpeg, result, height, quality, boxes)
                header = f"--{BOUNDARY}\r\nContent-Type: image/jpeg\r\nContent-Length: {len(data)}\r\n\r\n"
                yield header.encode() + data + b"\r\n"
        finally:
            pipeline.results.unsubscribe(subscription)

    return StreamingResponse(
        generate(), media_type=f"multipart/x-mixed-replace; boundary={BOUNDARY}", headers={"Cache-Control": "no-store"}
    )


async def _read_limited(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"image is larger than the {limit // 1_000_000} MB limit")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPException(413, f"image is larger than the {limit // 1_000_000} MB limit")
    return bytes(body)


async def _image_bytes(request: Request, limit: int) -> tuple[bytes, str]:
    body = await _read_limited(request, limit)
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        return body, "upload"
    from starlette.formparsers import MultiPartParser

    async def replay() -> AsyncGenerator[bytes, None]:
        yield body

    try:
        form = await MultiPartParser(request.headers, replay(), max_part_size=limit).parse()
    except Exception as exc:  # noqa: BLE001 - malformed multipart bodies come in many shapes
        raise HTTPException(400, f"malformed multipart body: {exc}") from None
    for value in form.values():
        if not isinstance(value, str):
            return await value.read(), value.filename or "upload"
    raise HTTPException(400, "multipart body has no file part; send the image as a file field, e.g. -F image=@x.jpg")


@router.post("/detect", response_model=DetectResponse, summary="Detect objects in an uploaded image")
async def detect(request: Request, stream: str | None = None) -> dict[str, Any]:
    """Send the image as the raw body or as a multipart file; `stream` picks whose model runs (default: the first)."""
    manager = manager_of(request)
    stream_id = stream or next(iter(manager.pipelines))
    pipeline_of(request, stream_id)
    limit = int(request.app.state.config.server.max_upload_mb * 1_000_000)
    data, name = await _image_bytes(request, limit)
    try:
        image = decode_image(data, name)
    except ImageError as exc:
        raise HTTPException(415 if data else 400, str(exc)) from None
    uploads: UploadDetectors = request.app.state.uploads

    def run() -> dict[str, Any]:
        with uploads.lock(stream_id):
            detector = uploads.get(stream_id)
            return result_record(name, detector.detect(image), detector)

    return await asyncio.to_thread(run)


@router.get("/compare", summary="Live comparison: per-backend latency, fps and agreement with the first backend")
def compare(request: Request) -> list[dict[str, Any]]:
    return manager_of(request).compare()


@router.get("/compare/events", summary="Server-Sent Events: the /compare figures once a second")
async def compare_events(
    request: Request, interval: Annotated[float, Query(ge=0.2, le=60)] = 1.0
) -> EventSourceResponse:
    manager = manager_of(request)

    async def generate() -> AsyncIterator[dict[str, str]]:
        while True:
            figures = await asyncio.to_thread(manager.compare)
            yield {"event": "compare", "data": json.dumps(figures)}
            await asyncio.sleep(interval)

    return EventSourceResponse(generate(), ping=15, send_timeout=30)


@router.get("/backends", summary="Inference engines, devices found, and the registry models each can run")
def backends() -> list[dict[str, Any]]:
    return backends_report()


@router.get("/stats", summary="Per-stream and per-backend figures")
def stats(request: Request) -> dict[str, Any]:
    return manager_of(request).stats()


@router.get("/metrics", summary="Prometheus exposition")
def metrics(request: Request) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(request.app.state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


@router.get("/health/live", response_model=Health, summary="The process is up")
def live() -> dict[str, Any]:
    return {"status": "alive"}


@router.get("/health/ready", response_model=Health, summary="Every model loaded and warmed up", responses={503: {}})
def ready(request: Request) -> Response:
    manager = manager_of(request)
    states: dict[str, str] = {sid: p.state for sid, p in manager.pipelines.items()}
    body = Health(status="ready" if manager.ready else "not ready", streams=states)
    return JSONResponse(body.model_dump(), status_code=200 if manager.ready else 503)
