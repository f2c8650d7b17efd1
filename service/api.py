"""Routes of /api/v1. Thin: every handler calls edge/ objects held by the app."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, HTTPException, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import TypeAdapter
from sse_starlette.event import ServerSentEvent

from edge_inference.edge.runtime.compare import CompareSnapshot
from edge_inference.edge.runtime.health import is_live, service_health
from edge_inference.edge.runtime.snapshots import (
    ServiceStats,
    StreamSummary,
    compare_snapshots,
    service_stats,
    stream_summaries,
    stream_summary,
)
from edge_inference.edge.runtime.streams import StreamManager
from edge_inference.edge.stream.pipeline import FrameResult, StreamPipeline
from edge_inference.edge.tools.backends_report import BackendReport, backends_report
from edge_inference.service.encodings import EncodingCache
from edge_inference.service.errors import quoted
from edge_inference.service.flush_clock import FlushClock
from edge_inference.service.limits import ClientSlots, busy
from edge_inference.service.live import LiveChannel, LiveOptions
from edge_inference.service.query_names import ALSO_READ
from edge_inference.service.schemas import DetectResponse, Health, LatestDetections, ServiceSetup
from edge_inference.service.streaming import ClosingStreamingResponse, EventStream
from edge_inference.service.upload_options import ALSO_READ_BY_UPLOADS, QUERY_PARAMETERS, upload_asks
from edge_inference.service.upload_text import image_bytes, refuse_url_parameter
from edge_inference.service.uploads import UploadDetectors, file_part, run_upload

router = APIRouter()
BOUNDARY = "frame"
FRESH_STATES = ("running", "ended")  # a finished file's last frame is final, not stale
COMPARE_JSON = TypeAdapter(list[CompareSnapshot])


def manager_of(request: Request | WebSocket) -> StreamManager:
    manager: StreamManager = request.app.state.manager
    return manager


def pipeline_of(request: Request | WebSocket, stream_id: str) -> StreamPipeline:
    pipeline = manager_of(request).pipelines.get(stream_id)
    if pipeline is None:
        known = ", ".join(list(manager_of(request).pipelines)[:20])
        raise HTTPException(404, f"no stream {quoted(stream_id)}; streams: {known}")
    return pipeline


def current_or_503(pipeline: StreamPipeline) -> FrameResult:
    """The newest result, refused when it is stale: the stream is not delivering frames now."""
    latest, state = pipeline.latest, pipeline.state
    if latest is None or state not in FRESH_STATES:
        detail = f"stream {pipeline.stream_id} is {state}"
        detail += "; no frame processed yet" if latest is None else f"; its newest frame is {latest.age_s:.1f} s old"
        if pipeline.error:
            detail += f"; error: {pipeline.error}"
        raise busy(detail)
    return latest


@router.get("/streams", response_model=list[StreamSummary], summary="Streams with their source, model and state")
def list_streams(request: Request) -> list[StreamSummary]:
    return stream_summaries(manager_of(request))


@router.get("/streams/{stream_id}", response_model=StreamSummary, summary="One stream: its source, model and state")
def one_stream(request: Request, stream_id: str) -> StreamSummary:
    return stream_summary(manager_of(request), pipeline_of(request, stream_id))


@router.get(
    "/streams/{stream_id}/detections/latest",
    summary="The newest frame's detections and timing, with its age; 503 while the stream is not delivering frames",
    response_class=Response,
    responses={
        200: {"model": LatestDetections, "description": "the newest frame (also in X-Frame-Age)"},
        503: {"description": "the stream is loading, reconnecting or stalled: no fresh frame"},
    },
)
def latest_detections(request: Request, stream_id: str) -> Response:
    result = current_or_503(pipeline_of(request, stream_id))
    age = result.age_s
    body = _cache(request).event_json(result)[:-1] + f', "age_s": {age:.3f}}}'.encode()  # the shared event + its age
    return Response(body, media_type="application/json", headers={"X-Frame-Age": f"{age:.3f}"})


T = TypeVar("T")


def _as_is(batch: list[FrameResult]) -> list[FrameResult]:
    return batch


async def _batches(
    request: Request | WebSocket, pipeline: StreamPipeline, encode: Callable[[list[FrameResult]], T]
) -> AsyncGenerator[T, None]:
    """Results in order, in batches of whatever accumulated while the client was busy, each `encode`d; ends on
    shutdown. One generator between the response and the subscription: each level a frame passes through is paid
    per client per frame (issue 62)."""
    server = request.app.state.config.server
    subscription = pipeline.results.subscribe(server.subscriber_buffer)
    clock: FlushClock = request.app.state.flush_clock
    sent = float("-inf")
    try:
        while batch := await subscription.batch():
            # Above the flush rate, gather events until the tick every client shares instead of paying a write per
            # client per frame (the loop wakes once for all of them); below it, write at once, with no tick to
            # wake for in between (a wake per client per frame, issue 62).
            if await clock.pace(sent):
                batch += subscription.drain()  # what came while it waited
            sent = time.monotonic()
            yield encode(batch)
    finally:
        pipeline.results.unsubscribe(subscription)


def _slots(request: Request | WebSocket) -> ClientSlots:
    slots: ClientSlots = request.app.state.client_slots
    return slots


TOO_MANY: dict[int | str, dict[str, Any]] = {
    503: {"description": "the stream has max_clients_per_stream streaming clients already"}
}


def media(kind: str, description: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI answer of a route that does not return JSON."""
    return {200: {"content": {kind: {}}, "description": description}}


EVENT_STREAM = "text/event-stream"


@router.get(
    "/streams/{stream_id}/events",
    summary="Server-Sent Events: one 'detections' event per processed frame",
    response_class=EventStream,
    responses=media(EVENT_STREAM, "`event: detections`, `data:` a FrameEvent (schema: LatestDetections less age_s)")
    | TOO_MANY,
)
async def events(request: Request, stream_id: str) -> EventStream:
    pipeline = pipeline_of(request, stream_id)
    cache = _cache(request)
    slots = _slots(request)
    slots.take(stream_id)

    # Encoded once per frame for every client, one write per batch; the response closes the generator (which
    # unsubscribes) however it ends. A client that stops reading only fills its own buffer, and is cut after
    # send_timeout_s (server.py).
    return EventStream(_batches(request, pipeline, cache.sse_batch), on_close=lambda: slots.give_back(stream_id))


@router.websocket("/streams/{stream_id}/ws")
async def websocket_stream(websocket: WebSocket, stream_id: str) -> None:
    pipeline = manager_of(websocket).pipelines.get(stream_id)
    if pipeline is None:
        await websocket.close(code=4404, reason=f"no stream {quoted(stream_id)}"[:120])
        return
    slots = _slots(websocket)
    try:
        slots.take(stream_id)
    except HTTPException as exc:  # refused before the handshake: 503 with Retry-After, as for SSE and MJPEG
        busy = JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
        await websocket.send_denial_response(busy)
        return
    send_timeout = websocket.app.state.config.server.send_timeout_s
    cache = _cache(websocket)
    state = websocket.app.state
    state.websockets += 1
    try:
        await websocket.accept()
        async with contextlib.aclosing(_batches(websocket, pipeline, _as_is)) as batches:  # unsubscribes on any way out
            async for batch in batches:
                for result in batch:
                    await asyncio.wait_for(websocket.send_text(cache.event_json(result).decode()), send_timeout)
        await websocket.close(code=1001, reason="the service is stopping")  # the stream ended: shutdown
    except (WebSocketDisconnect, RuntimeError, TimeoutError, OSError):
        return
    finally:
        state.websockets -= 1
        slots.give_back(stream_id)


def _cache(request: Request | WebSocket) -> EncodingCache:
    cache: EncodingCache = request.app.state.encodings
    return cache


Height = Annotated[int | None, Query(ge=16, le=4320, description="Scale frames down to this height")]
Quality = Annotated[int, Query(ge=10, le=100)]
Zones = Annotated[bool, Query(description="Draw the stream's zones and lines, with their counts")]
Regions = Annotated[bool, Query(description="Draw the tiles or motion regions the frame was run as (`regions:`)")]


@router.get(
    "/streams/{stream_id}/snapshot.jpg",
    summary="The newest processed frame as JPEG",
    response_class=Response,
    responses=media("image/jpeg", "the newest frame, with boxes unless boxes=false"),
)
async def snapshot(
    request: Request,
    stream_id: str,
    height: Height = None,
    quality: Quality = 80,
    boxes: bool = True,
    zones: Zones = False,
    regions: Regions = False,
) -> Response:
    result = current_or_503(pipeline_of(request, stream_id))
    data = await _cache(request).jpeg(result, height, quality, boxes, zones, regions)
    return Response(data, media_type="image/jpeg", headers={"Cache-Control": "no-store"})


@router.get(
    "/streams/{stream_id}/video.mjpg",
    summary="Annotated MJPEG (multipart/x-mixed-replace)",
    response_class=StreamingResponse,
    responses=media(f"multipart/x-mixed-replace; boundary={BOUNDARY}", "one JPEG part per frame") | TOO_MANY,
)
async def mjpeg(
    request: Request,
    stream_id: str,
    fps: Annotated[float, Query(gt=0, le=60)] = 10,
    height: Height = None,
    quality: Quality = 70,
    boxes: bool = True,
    zones: Zones = False,
    regions: Regions = False,
) -> StreamingResponse:
    pipeline = pipeline_of(request, stream_id)
    interval = 1.0 / fps
    cache = _cache(request)
    slots = _slots(request)
    slots.take(stream_id)

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
                data = await cache.jpeg(result, height, quality, boxes, zones, regions)
                header = f"--{BOUNDARY}\r\nContent-Type: image/jpeg\r\nContent-Length: {len(data)}\r\n\r\n"
                yield header.encode() + data + b"\r\n"
        finally:
            pipeline.results.unsubscribe(subscription)

    return ClosingStreamingResponse(
        generate(),
        media_type=f"multipart/x-mixed-replace; boundary={BOUNDARY}",
        # X-Accel-Buffering: nginx in front passes frames on as they come, instead of reading the endless body
        # into its buffers (and temp files) as fast as it is made, past a slow viewer's own limit (as SSE sends it)
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        on_close=lambda: slots.give_back(stream_id),
    )


UPLOAD_BODY = {
    "required": True,
    "content": {
        "image/*": {"schema": {"type": "string", "format": "binary"}},
        "multipart/form-data": {
            "schema": {"type": "object", "properties": {"image": {"type": "string", "format": "binary"}}}
        },
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["image"],
                "properties": {"image": {"type": "string", "description": "the image in base64, or a data: URL"}},
            }
        },
        "text/plain": {"schema": {"type": "string", "description": "the image in base64, or a data: URL"}},
    },
}


@router.post(
    "/detect",
    response_model=DetectResponse,
    summary="Detect objects in an uploaded image",
    # the body is read raw and the thresholds under two names each, so FastAPI cannot declare them itself
    openapi_extra={"requestBody": UPLOAD_BODY, "parameters": QUERY_PARAMETERS, ALSO_READ: ALSO_READ_BY_UPLOADS},
    responses={
        400: {"description": "empty or malformed body"},
        404: {"description": "no such stream (the `stream` parameter)"},
        422: {"description": "a threshold out of range, or a class the model does not detect"},
        408: {"description": "the body did not arrive in time"},
        413: {"description": "body or pixel count over the limit"},
        415: {"description": "not an image (JPEG, PNG, BMP, WebP, TIFF, GIF, AVIF), or a truncated one"},
        503: {"description": "busy (see Retry-After), or the stream's model is not loaded"},
    },
)
async def detect(request: Request, stream: str | None = None) -> dict[str, Any]:
    """Send the image as the raw body or as a multipart file (base64, a data: URL or `{"image": "<base64>"}` are
    read too); `stream` picks whose model runs (default: the first). `conf`, `iou`, `max_det` and `classes` replace
    the stream's own for this image."""
    manager = manager_of(request)
    stream_id = stream or next(iter(manager.pipelines))
    pipeline_of(request, stream_id)
    server = request.app.state.config.server
    uploads: UploadDetectors = request.app.state.uploads
    limit = int(server.max_upload_mb * 1_000_000)
    max_pixels = int(server.max_upload_megapixels * 1_000_000)
    kind = request.headers.get("content-type", "").lower()
    multipart = kind.startswith("multipart/form-data")
    asks = upload_asks(request.query_params)

    def run(body: bytes) -> dict[str, Any]:
        refuse_url_parameter(body, request.query_params)
        data, name = file_part(body, request.headers, limit) if multipart else (image_bytes(body, kind), "upload")
        return uploads.detect(stream_id, data, name, max_pixels, asks)

    return await run_upload(request, limit, run)


LIVE_SLOT = "(dashboards)"  # live channels count against max_clients_per_stream as one more "stream"


@router.get(
    "/setup",
    response_model=ServiceSetup,
    summary="What this service runs: its streams, whether it keeps events, its comparison groups",
)
def setup(request: Request) -> ServiceSetup:
    manager = manager_of(request)
    return ServiceSetup(
        streams=list(manager.pipelines),
        events=manager.events.recorder is not None,
        compare_groups=sorted(manager.groups),
        live="/api/v1/live",
    )


@router.get(
    "/live",
    summary="Server-Sent Events for a dashboard: every stream on one connection",
    response_class=EventStream,
    responses=media(
        EVENT_STREAM,
        "`event: detections` (a FrameEvent: the newest frame of a stream, at most frame_hz a second per stream), "
        '`event: thumb` ({"stream", "frame", "jpeg": base64 of a JPEG thumb_height pixels high, boxes and zones '
        "drawn}, at most thumb_fps a second per stream), `event: change` (as /events/stream, when events are kept), "
        "`event: compare` (the /compare answer once a second, when streams are compared)",
    )
    | TOO_MANY,
)
async def live_channel(
    request: Request,
    frame_hz: Annotated[float, Query(gt=0, le=60)] = 10.0,
    thumb_fps: Annotated[float, Query(gt=0, le=10)] = 2.0,
    thumb_height: Annotated[int, Query(ge=60, le=720)] = 240,
) -> EventStream:
    manager, server, slots = manager_of(request), request.app.state.config.server, _slots(request)
    slots.take(LIVE_SLOT, what="the live channel (dashboards)")
    options = LiveOptions(frame_hz, thumb_fps, thumb_height)
    channel = LiveChannel(manager, _cache(request), options, server.subscriber_buffer, request.app.state.flush_clock)

    def close() -> None:
        channel.close()
        slots.give_back(LIVE_SLOT)

    return EventStream(channel.messages(), on_close=close)


@router.get(
    "/compare",
    response_model=list[CompareSnapshot],
    summary="Live comparison: per-backend latency, fps and agreement with the first backend",
)
def compare(request: Request) -> list[CompareSnapshot]:
    return compare_snapshots(manager_of(request))


@router.get(
    "/compare/events",
    summary="Server-Sent Events: the /compare figures once a second",
    response_class=EventStream,
    responses=media(EVENT_STREAM, "`event: compare`, `data:` the /compare answer"),
)
async def compare_events(request: Request, interval: Annotated[float, Query(ge=0.2, le=60)] = 1.0) -> EventStream:
    manager = manager_of(request)

    shutdown: asyncio.Event = request.app.state.shutdown

    async def generate() -> AsyncIterator[bytes]:
        while not shutdown.is_set():
            figures = await asyncio.to_thread(compare_snapshots, manager)
            yield ServerSentEvent(data=COMPARE_JSON.dump_json(figures).decode(), event="compare").encode()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(shutdown.wait(), interval)

    return EventStream(generate())


@router.get(
    "/backends",
    response_model=list[BackendReport],
    summary="Inference engines, devices found, and the registry models each can run",
)
def backends() -> list[BackendReport]:
    return backends_report()


@router.get("/stats", response_model=ServiceStats, summary="Per-stream and per-backend figures")
def stats(request: Request) -> ServiceStats:
    return service_stats(manager_of(request))


@router.get(
    "/metrics",
    summary="Prometheus exposition",
    response_class=Response,
    responses=media("text/plain; version=0.0.4", "Prometheus text format"),
)
def metrics(request: Request) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(request.app.state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


@router.head("/health/live", include_in_schema=False)  # load balancers that probe with HEAD: not a 405
@router.get("/health/live", response_model=Health, summary="The process is sound", responses={503: {}})
async def live(request: Request) -> JSONResponse:
    """200 while the event loop answers and every stream's threads are alive (or being restarted). On the event loop
    itself, never queued behind the worker threads other routes wait for: a probe is answered ahead of them."""
    alive = is_live(manager_of(request))
    body = Health(status="alive" if alive else "unsound", streams={})
    return JSONResponse(body.model_dump(), status_code=200 if alive else 503)


@router.head("/health/ready", include_in_schema=False)
@router.get(
    "/health/ready",
    response_model=Health,
    summary="Can the service do its job: ok, degraded (200 unless strict_ready), starting or down (503)",
    responses={503: {"model": Health}},
)
async def ready(request: Request) -> JSONResponse:
    """As `live`, on the event loop: the figures it reads are in memory, nothing waits."""
    health = service_health(manager_of(request), request.app.state.config.server.strict_ready)
    body = Health(status=health.status, strict=health.strict, streams=health.streams, problems=health.problems)
    return JSONResponse(body.model_dump(), status_code=200 if health.ready else 503)
