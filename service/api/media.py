"""Routes of a stream's pictures: the newest frame as JPEG, and MJPEG."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse

from edge_inference.service.api.common import (
    TOO_MANY,
    cache_of,
    current_or_503,
    media,
    pipeline_of,
    slots_of,
)
from edge_inference.service.streaming import ClosingStreamingResponse

router = APIRouter()


BOUNDARY = "frame"
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
    data = await cache_of(request).jpeg(result, height, quality, boxes, zones, regions)
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
    cache = cache_of(request)
    slots = slots_of(request)
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
