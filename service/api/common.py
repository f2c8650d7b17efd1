"""What every route module shares: the stream manager and a stream asked for, a fresh result or 503, client
slots, the encodings cache, streamed batches, the OpenAPI answer of a route that is not JSON."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable
from typing import Any, TypeVar

from fastapi import HTTPException, Request, WebSocket

from edge_inference.edge.runtime.streams import StreamManager
from edge_inference.edge.stream.pipeline import FrameResult, StreamPipeline
from edge_inference.service.encodings import EncodingCache
from edge_inference.service.errors import quoted
from edge_inference.service.flush_clock import FlushClock
from edge_inference.service.limits import ClientSlots, busy

FRESH_STATES = ("running", "ended")  # a finished file's last frame is final, not stale


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


T = TypeVar("T")


async def batches(
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


def slots_of(request: Request | WebSocket) -> ClientSlots:
    slots: ClientSlots = request.app.state.client_slots
    return slots


TOO_MANY: dict[int | str, dict[str, Any]] = {
    503: {"description": "the stream has max_clients_per_stream streaming clients already"}
}


def media(kind: str, description: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI answer of a route that does not return JSON."""
    return {200: {"content": {kind: {}}, "description": description}}


EVENT_STREAM = "text/event-stream"


def cache_of(request: Request | WebSocket) -> EncodingCache:
    cache: EncodingCache = request.app.state.encodings
    return cache
