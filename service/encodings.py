"""Wire encodings of a frame's result (SSE bytes, JPEGs), made once and shared by every client that wants them.

The service owns the wire formats; results from `edge` stay immutable. Clients follow the newest frames, so a small
LRU keyed by (stream, frame, kind) holds everything that is still being sent.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

from edge_inference.edge.pipeline import FrameResult

CAPACITY = 256  # a few frames x (SSE + a few JPEG settings) x streams


class EncodingCache:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._items: OrderedDict[Hashable, bytes] = OrderedDict()
        self._lock = threading.Lock()  # JPEGs are made on worker threads

    def get(self, result: FrameResult, kind: Hashable, make: Callable[[], bytes]) -> bytes:
        key = (result.stream_id, result.index, result.timing.captured_at, kind)
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
