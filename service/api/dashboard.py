"""Routes of the dashboard: what the service runs, and every stream on one live SSE channel."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from edge_inference.service.api.common import (
    EVENT_STREAM,
    TOO_MANY,
    cache_of,
    manager_of,
    media,
    slots_of,
)
from edge_inference.service.live import LiveChannel, LiveOptions
from edge_inference.service.schemas import ServiceSetup
from edge_inference.service.streaming import EventStream

router = APIRouter()


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
    manager, server, slots = manager_of(request), request.app.state.config.server, slots_of(request)
    slots.take(LIVE_SLOT, what="the live channel (dashboards)")
    options = LiveOptions(frame_hz, thumb_fps, thumb_height)
    channel = LiveChannel(manager, cache_of(request), options, server.subscriber_buffer, request.app.state.flush_clock)

    def close() -> None:
        channel.close()
        slots.give_back(LIVE_SLOT)

    return EventStream(channel.messages(), on_close=close)
