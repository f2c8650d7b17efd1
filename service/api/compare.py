"""Routes of a live comparison of backends and models: the figures, and an SSE stream of them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import TypeAdapter
from sse_starlette.event import ServerSentEvent

from edge_inference.edge.runtime.compare import CompareSnapshot
from edge_inference.edge.runtime.snapshots import (
    compare_snapshots,
)
from edge_inference.service.api.common import (
    EVENT_STREAM,
    manager_of,
    media,
)
from edge_inference.service.streaming import EventStream

router = APIRouter()


COMPARE_JSON = TypeAdapter(list[CompareSnapshot])


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
