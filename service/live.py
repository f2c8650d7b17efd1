"""The dashboard's one live channel: every stream on one Server-Sent Events connection.

A browser keeps at most six connections to a host over HTTP/1.1; a page holding a video and an event stream per
camera stalls from the third camera on. This channel carries, for every stream, its newest frame's detections (at
most `frame_hz` a second), a small JPEG of it (at most `thumb_fps` a second), the event layer's changes and the
comparison figures: the page needs it and, for the one camera in focus, its full-rate MJPEG; two connections
whatever the number of cameras.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from pydantic import TypeAdapter
from sse_starlette.event import ServerSentEvent

from edge_inference.edge.events.recorder import RecordedChange
from edge_inference.edge.runtime.compare import CompareSnapshot
from edge_inference.edge.runtime.snapshots import compare_snapshots
from edge_inference.edge.runtime.streams import StreamManager
from edge_inference.edge.stream.pipeline import FrameResult
from edge_inference.edge.stream.publish import Subscription
from edge_inference.service.encodings import EncodingCache
from edge_inference.service.flush_clock import FlushClock

COMPARE_JSON = TypeAdapter(list[CompareSnapshot])
COMPARE_EVERY_S = 1.0
THUMB_QUALITY = 70


@dataclass(frozen=True)
class LiveOptions:
    frame_hz: float  # detections per stream per second (the newest frame's)
    thumb_fps: float  # small JPEGs per stream per second
    thumb_height: int


async def _thumb_event(cache: EncodingCache, result: FrameResult, height: int) -> bytes:
    """The frame's `thumb` event (a small JPEG in base64, in JSON, as SSE): made once, on the cache's workers, for
    every dashboard, those asking while it is made included."""

    def make() -> bytes:
        jpeg = cache.jpeg_now(result, height, THUMB_QUALITY, True, True)
        thumb = {"stream": result.stream_id, "frame": result.index, "jpeg": base64.b64encode(jpeg).decode()}
        return ServerSentEvent(data=json.dumps(thumb), event="thumb").encode()

    return await cache.get_async(result, ("thumb", height), make)


def _compare_event(manager: StreamManager) -> bytes:
    figures = compare_snapshots(manager)
    return ServerSentEvent(data=COMPARE_JSON.dump_json(figures).decode(), event="compare").encode()


class LiveChannel:
    """One client's subscriptions to every stream (and to the event layer's changes), read in turn."""

    def __init__(
        self, manager: StreamManager, cache: EncodingCache, options: LiveOptions, buffer: int, clock: FlushClock
    ) -> None:
        self.manager, self.cache, self.options, self.clock = manager, cache, options, clock
        self.streams = {sid: (p, p.results.subscribe(buffer)) for sid, p in manager.pipelines.items()}
        recorder = manager.events.recorder
        self.changes: Subscription[RecordedChange] | None = recorder.changes.subscribe(256) if recorder else None
        self._news = asyncio.Event()  # set by any of the subscriptions when it has something new, or closes
        for _, subscription in self.streams.values():
            subscription.also_wake(self._news)
        if self.changes is not None:
            self.changes.also_wake(self._news)
        self._sent_frame: dict[str, float] = {}
        self._sent_thumb: dict[str, float] = {}
        self._sent_compare = float("-inf")

    def close(self) -> None:
        for pipeline, subscription in self.streams.values():
            pipeline.results.unsubscribe(subscription)
        recorder = self.manager.events.recorder
        if recorder is not None and self.changes is not None:
            recorder.changes.unsubscribe(self.changes)

    @property
    def ended(self) -> bool:
        return all(subscription.closed for _, subscription in self.streams.values())

    async def messages(self) -> AsyncIterator[bytes]:
        """Writes of whatever is due, at most one a tick of the clock every streaming client shares (so every
        dashboard and SSE client wakes the event loop once a period together), until the service stops. Between
        writes a dashboard sleeps until a stream or the event layer has something new (or the comparison figures
        are due): 50 dashboards looking at every tick (30 a second) for frames that come 10 a second cost the
        service CPU for nothing (issue 62)."""
        while not self.ended:
            started = time.monotonic()
            self._news.clear()  # before draining: what comes after it wakes the next wait
            chunk = await self._due(started)
            if chunk:
                yield chunk
            await self._something_new()
            await self.clock.pace(started)  # news within a period waits for the shared tick; later news is due now

    async def _something_new(self) -> None:
        if self._news.is_set():
            return
        if not self.manager.groups:
            await self._news.wait()
            return
        wait = self._sent_compare + COMPARE_EVERY_S - time.monotonic()
        if wait > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._news.wait(), wait)

    async def _due(self, now: float) -> bytes:
        parts: list[bytes] = []
        thumbs: list[FrameResult] = []
        for stream_id, (_, subscription) in self.streams.items():
            results = subscription.drain()
            if not results:
                continue
            newest = results[-1]
            if now - self._sent_frame.get(stream_id, float("-inf")) >= 1.0 / self.options.frame_hz:
                self._sent_frame[stream_id] = now
                parts.append(self.cache.sse(newest))
            if now - self._sent_thumb.get(stream_id, float("-inf")) >= 1.0 / self.options.thumb_fps:
                self._sent_thumb[stream_id] = now
                thumbs.append(newest)
        parts += await self._thumbs(thumbs)
        if self.changes is not None:
            changes = self.changes.drain()
            parts += [ServerSentEvent(data=json.dumps(c.payload), event="change").encode() for c in changes]
        if self.manager.groups and now - self._sent_compare >= COMPARE_EVERY_S:
            self._sent_compare = now
            key = ("compare", int(now / COMPARE_EVERY_S))  # the figures of this second, made once for everyone
            parts.append(await self.cache.once_async(key, lambda: _compare_event(self.manager)))
        return b"".join(parts)

    async def _thumbs(self, results: list[FrameResult]) -> list[bytes]:
        return [await _thumb_event(self.cache, result, self.options.thumb_height) for result in results]
