"""Wire encodings of a frame's result (the JSON event, SSE bytes, JPEGs), made once and shared by every client.

The service owns the wire formats; results from `edge` stay immutable. Clients follow the newest frames, so a small
cache keyed by (stream, frame, kind), dropping the oldest made first, holds everything that is still being sent.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor

from sse_starlette.event import ServerSentEvent

from edge_inference.edge.stream.drawing import render_jpeg
from edge_inference.edge.stream.pipeline import FrameResult

CAPACITY = 384  # a few frames x (JSON + SSE + a few JPEG settings) x streams


def event_json(result: FrameResult) -> bytes:
    """The JSON of one frame's detections and timing: the body of SSE and WebSocket events and of detections/latest."""
    return json.dumps(
        {
            "stream": result.stream_id,
            "frame": result.index,
            "width": result.width,
            "height": result.height,
            "detections": [d.to_dict() for d in result.detections],
            "timing_ms": result.timing.to_dict(),
        }
    ).encode()


WORKERS = 2  # encodings made at once, on threads of the cache's own (JPEG encoding is CPU work)


class EncodingCache:
    """Bytes made once per key for every client, and kept while clients may still ask (the oldest made goes first:
    a kept one is read without the lock, so reading it does not renew it; frames only get older). One maker per key at a
    time: clients asking while it is being made wait for that one (50 dashboards asking for a thumbnail in one tick
    had each sent its own job to a worker thread, and up to six encoded it side by side)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._items: OrderedDict[Hashable, bytes] = OrderedDict()
        self._making: dict[Hashable, Future[bytes]] = {}  # key -> the one making it now
        self._lock = threading.Lock()  # never held while making
        self._workers = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="encode")

    @staticmethod
    def key(result: FrameResult, kind: Hashable) -> Hashable:
        return (result.stream_id, result.index, result.timing.captured_at, kind)

    def get(self, result: FrameResult, kind: Hashable, make: Callable[[], bytes]) -> bytes:
        return self.once(self.key(result, kind), make)

    async def get_async(self, result: FrameResult, kind: Hashable, make: Callable[[], bytes]) -> bytes:
        """As `get`, from the event loop: kept bytes at once, else made on the cache's workers."""
        return await self.once_async(self.key(result, kind), make)

    def once(self, key: Hashable, make: Callable[[], bytes]) -> bytes:
        """`make()`'s bytes under `key`, made once for every client asking while it is kept (here, on this thread,
        or by whoever is making it already)."""
        kept = self._items.get(key)  # every client after the first: a read, whole under the GIL, without the lock
        if kept is not None:
            return kept
        data, making, mine = self._claim(key)
        if data is not None:
            return data
        if mine:
            self._make(key, make, making)
        return making.result()

    async def once_async(self, key: Hashable, make: Callable[[], bytes]) -> bytes:
        kept = self._items.get(key)  # as in `once`
        if kept is not None:
            return kept
        data, making, mine = self._claim(key)
        if data is not None:
            return data
        if mine:
            self._workers.submit(self._make, key, make, making)
        return await asyncio.wrap_future(making)

    def _claim(self, key: Hashable) -> tuple[bytes | None, Future[bytes], bool]:
        """(the kept bytes, or None; the future they come in; whether the caller is to make them)."""
        with self._lock:
            data = self._items.get(key)
            if data is not None:
                self._items.move_to_end(key)
                return data, _DONE, False
            making = self._making.get(key)
            if making is not None:
                return None, making, False
            making = self._making[key] = Future()
            return None, making, True

    def _make(self, key: Hashable, make: Callable[[], bytes], making: Future[bytes]) -> None:
        try:
            data = make()
        except BaseException as exc:  # noqa: BLE001 - handed to every waiter, who raises it
            with self._lock:
                del self._making[key]
            making.set_exception(exc)
            return
        with self._lock:
            self._items[key] = data
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
            del self._making[key]
        making.set_result(data)

    def event_json(self, result: FrameResult) -> bytes:
        return self.get(result, "json", lambda: event_json(result))

    def sse(self, result: FrameResult) -> bytes:
        """The frame's `detections` Server-Sent Event."""

        def encode() -> bytes:
            data = self.event_json(result).decode()
            return ServerSentEvent(data=data, event="detections", id=str(result.index)).encode()

        return self.get(result, "sse", encode)

    def sse_batch(self, results: list[FrameResult]) -> bytes:
        """One write of a batch's events, the frame's alone where the client keeps up."""
        return self.sse(results[0]) if len(results) == 1 else b"".join(map(self.sse, results))

    async def jpeg(
        self,
        result: FrameResult,
        height: int | None,
        quality: int,
        boxes: bool,
        zones: bool = False,
        regions: bool = False,
    ) -> bytes:
        """The frame as a JPEG, made on the cache's workers; clients watching with the same settings share one."""
        key = ("jpeg", height, quality, boxes, zones, regions)
        return await self.get_async(result, key, _jpeg_maker(result, height, quality, boxes, zones, regions))

    def jpeg_now(
        self, result: FrameResult, height: int | None, quality: int, boxes: bool, zones: bool = False
    ) -> bytes:
        """As `jpeg`, made on this thread where no one has: for work already on a worker thread."""
        key = ("jpeg", height, quality, boxes, zones, False)
        return self.get(result, key, _jpeg_maker(result, height, quality, boxes, zones, False))


def _jpeg_maker(
    result: FrameResult, height: int | None, quality: int, boxes: bool, zones: bool, regions: bool
) -> Callable[[], bytes]:
    overlays = (result.zones, result.lines) if zones else ((), ())

    def encode() -> bytes:
        return render_jpeg(
            result.image, result.detections, height=height, quality=quality, boxes=boxes,
            zones=overlays[0], lines=overlays[1], regions=result.regions if regions else (),
        )  # fmt: skip

    return encode


_DONE: Future[bytes] = Future()  # stands for "nothing to wait for" where the bytes were kept
