"""Fan-out of results to any number of subscribers, each with a bounded buffer that drops its oldest item.

The pipeline thread never waits for a subscriber: a slow or stalled one only loses its own oldest items.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Subscription(Generic[T]):
    def __init__(self, maxlen: int, loop: asyncio.AbstractEventLoop) -> None:
        self._items: deque[T] = deque(maxlen=maxlen)
        self._loop = loop
        self._ready = asyncio.Event()
        self._wake_pending = False  # one wake-up call per batch, not per item
        self._lock = threading.Lock()
        self.dropped = 0
        self.closed = False

    def push(self, item: T) -> None:
        """Called from the publishing thread."""
        with self._lock:
            if len(self._items) == self._items.maxlen:
                self.dropped += 1
            self._items.append(item)
            if self._wake_pending:
                return
            self._wake_pending = True
        try:
            self._loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:  # the subscriber's event loop has closed
            self.closed = True

    def close(self) -> None:
        """Wake the consumer so it can see the stream is gone."""
        self.closed = True
        with contextlib.suppress(RuntimeError):  # the subscriber's event loop has closed already
            self._loop.call_soon_threadsafe(self._ready.set)

    async def get(self) -> T | None:
        """The oldest buffered item; None once closed."""
        while True:
            with self._lock:
                if self._items:
                    return self._items.popleft()
                self._wake_pending = False
                self._ready.clear()
            if self.closed:
                return None
            await self._ready.wait()

    async def newest(self) -> T | None:
        """Skip to the newest item (for video, where only the latest frame matters)."""
        item = await self.get()
        with self._lock:
            while self._items:
                item = self._items.popleft()
        return item


class Broadcaster(Generic[T]):
    def __init__(self) -> None:
        self._subscriptions: list[Subscription[T]] = []
        self._lock = threading.Lock()
        self.dropped_by_departed = 0

    def subscribe(self, maxlen: int, loop: asyncio.AbstractEventLoop | None = None) -> Subscription[T]:
        subscription: Subscription[T] = Subscription(maxlen, loop or asyncio.get_running_loop())
        with self._lock:
            self._subscriptions = [*self._subscriptions, subscription]
        return subscription

    def unsubscribe(self, subscription: Subscription[T]) -> None:
        with self._lock:
            self._subscriptions = [s for s in self._subscriptions if s is not subscription]
            self.dropped_by_departed += subscription.dropped

    def publish(self, item: T) -> None:
        for subscription in self._subscriptions:  # a copy-on-write list: no lock on the hot path
            subscription.push(item)

    def close(self) -> None:
        for subscription in self._subscriptions:
            subscription.close()

    @property
    def subscribers(self) -> int:
        return len(self._subscriptions)

    @property
    def dropped(self) -> int:
        return self.dropped_by_departed + sum(s.dropped for s in self._subscriptions)
