"""Wire encodings of a frame's result (the JSON event, SSE bytes, JPEGs), made once and shared by every client.

The service owns the wire formats; results from `edge` stay immutable. Clients follow the newest frames, so a small
LRU keyed by (stream, frame, kind) holds everything that is still being sent.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

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


class EncodingCache:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._items: OrderedDict[Hashable, bytes] = OrderedDict()
        self._lock = threading.Lock()  # JPEGs are made on worker threads

    def get(self, result: FrameResult, kind: Hashable, make: Callable[[], bytes]) -> bytes:
        return self.once((result.stream_id, result.index, result.timing.captured_at, kind), make)

    def has(self, result: FrameResult, kind: Hashable) -> bool:
        """Made already: a caller may then skip the hop to a worker thread that making it would need."""
        with self._lock:
            return (result.stream_id, result.index, result.timing.captured_at, kind) in self._items

    def once(self, key: Hashable, make: Callable[[], bytes]) -> bytes:
        """`make()`'s bytes under `key`, made once for every client asking while it is kept."""
        with self._lock:
            data = self._items.get(key)
            if data is not None:
                self._items.move_to_end(key)
                return data
        data = make()  # outside the lock: two clients may race to encode once each, never block each other
        with self._lock:
            self._items[key] = data
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return data

    def event_json(self, result: FrameResult) -> bytes:
        return self.get(result, "json", lambda: event_json(result))

    def sse(self, result: FrameResult) -> bytes:
        """The frame's `detections` Server-Sent Event."""

        def encode() -> bytes:
            data = self.event_json(result).decode()
            return ServerSentEvent(data=data, event="detections", id=str(result.index)).encode()

        return self.get(result, "sse", encode)

    def jpeg(self, result: FrameResult, height: int | None, quality: int, boxes: bool, zones: bool = False) -> bytes:
        """The frame as a JPEG; clients watching with the same settings share one encoding. CPU work: call it on a
        worker thread."""
        overlays = (result.zones, result.lines) if zones else ((), ())

        def encode() -> bytes:
            return render_jpeg(
                result.image, result.detections, height=height, quality=quality, boxes=boxes,
                zones=overlays[0], lines=overlays[1],
            )  # fmt: skip

        return self.get(result, ("jpeg", height, quality, boxes, zones), encode)
