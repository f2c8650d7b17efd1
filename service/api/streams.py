"""Routes of a stream's detections: the streams, the newest frame's detections, SSE and WebSocket streams."""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import APIRouter, HTTPException, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, Response

from edge_inference.edge.runtime.snapshots import (
    StreamSummary,
    stream_summaries,
    stream_summary,
)
from edge_inference.edge.stream.pipeline import FrameResult
from edge_inference.service.api.common import (
    EVENT_STREAM,
    TOO_MANY,
    batches,
    cache_of,
    current_or_503,
    manager_of,
    media,
    pipeline_of,
    slots_of,
)
from edge_inference.service.errors import quoted
from edge_inference.service.schemas import LatestDetections
from edge_inference.service.streaming import EventStream

router = APIRouter()


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
    body = cache_of(request).event_json(result)[:-1] + f', "age_s": {age:.3f}}}'.encode()  # the shared event + its age
    return Response(body, media_type="application/json", headers={"X-Frame-Age": f"{age:.3f}"})


def _as_is(batch: list[FrameResult]) -> list[FrameResult]:
    return batch


@router.get(
    "/streams/{stream_id}/events",
    summary="Server-Sent Events: one 'detections' event per processed frame",
    response_class=EventStream,
    responses=media(EVENT_STREAM, "`event: detections`, `data:` a FrameEvent (schema: LatestDetections less age_s)")
    | TOO_MANY,
)
async def events(request: Request, stream_id: str) -> EventStream:
    pipeline = pipeline_of(request, stream_id)
    cache = cache_of(request)
    slots = slots_of(request)
    slots.take(stream_id)

    # Encoded once per frame for every client, one write per batch; the response closes the generator (which
    # unsubscribes) however it ends. A client that stops reading only fills its own buffer, and is cut after
    # send_timeout_s (server.py).
    return EventStream(batches(request, pipeline, cache.sse_batch), on_close=lambda: slots.give_back(stream_id))


@router.websocket("/streams/{stream_id}/ws")
async def websocket_stream(websocket: WebSocket, stream_id: str) -> None:
    pipeline = manager_of(websocket).pipelines.get(stream_id)
    if pipeline is None:
        await websocket.close(code=4404, reason=f"no stream {quoted(stream_id)}"[:120])
        return
    slots = slots_of(websocket)
    try:
        slots.take(stream_id)
    except HTTPException as exc:  # refused before the handshake: 503 with Retry-After, as for SSE and MJPEG
        busy = JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
        await websocket.send_denial_response(busy)
        return
    send_timeout = websocket.app.state.config.server.send_timeout_s
    cache = cache_of(websocket)
    state = websocket.app.state
    state.websockets += 1
    try:
        await websocket.accept()
        async with contextlib.aclosing(batches(websocket, pipeline, _as_is)) as results:  # unsubscribes on any way out
            async for batch in results:
                for result in batch:
                    await asyncio.wait_for(websocket.send_text(cache.event_json(result).decode()), send_timeout)
        await websocket.close(code=1001, reason="the service is stopping")  # the stream ended: shutdown
    except (WebSocketDisconnect, RuntimeError, TimeoutError, OSError):
        return
    finally:
        state.websockets -= 1
        slots.give_back(stream_id)
