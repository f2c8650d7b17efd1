"""Fan-out of results to any number of subscribers, each with a bounded buffer that drops its oldest item.

The pipeline thread never waits for a subscriber: a slow or stalled one only loses its own oldest items.
Subscribers live on asyncio event loops; each loop is woken once per published item, however many of its
subscribers are waiting.
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
        self.loop = loop
        self._ready = asyncio.Event()
        self._lock = threading.Lock()
        self._also: asyncio.Event | None = None
        self.dropped = 0
        self.closed = False

    def also_wake(self, event: asyncio.Event) -> None:
        """Set `event` too whenever this subscription is woken: a reader of several subscriptions waits on one event
        instead of looking at each of them on a timer."""
        self._also = event

    def push(self, item: T) -> None:
        """Called from the publishing thread; the caller wakes the loop."""
        with self._lock:
            if len(self._items) == self._items.maxlen:
                self.dropped += 1
            self._items.append(item)

    def wake(self) -> None:
        """Runs on the subscriber's loop."""
        self._ready.set()
        if self._also is not None:
            self._also.set()

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(RuntimeError):  # the subscriber's event loop has closed already
            self.loop.call_soon_threadsafe(self.wake)

    def drain(self) -> list[T]:
        """Everything buffered, oldest first, without waiting: for a reader that visits many subscriptions in turn."""
        with self._lock:
            items = list(self._items)
            self._items.clear()
        return items

    async def batch(self) -> list[T]:
        """Everything buffered, oldest first, waiting for at least one item; [] once closed."""
        while True:
            with self._lock:
                if self._items:
                    items = list(self._items)
                    self._items.clear()
                    return items
                self._ready.clear()
            if self.closed:
                return []
            await self._ready.wait()

    async def newest(self) -> T | None:
        """Only the newest item (video, where older frames are stale); None once closed."""
        items = await self.batch()
        return items[-1] if items else None


class Broadcaster(Generic[T]):
    def __init__(self) -> None:
        self._subscriptions: list[Subscription[T]] = []
        self._lock = threading.Lock()
        self.dropped_by_departed = 0
        self.closed = False

    def subscribe(self, maxlen: int, loop: asyncio.AbstractEventLoop | None = None) -> Subscription[T]:
        subscription: Subscription[T] = Subscription(maxlen, loop or asyncio.get_running_loop())
        with self._lock:
            if self.closed:
                subscription.closed = True  # stopping: a late subscriber's stream ends at once
            else:
                self._subscriptions = [*self._subscriptions, subscription]
        return subscription

    def unsubscribe(self, subscription: Subscription[T]) -> None:
        with self._lock:
            self._subscriptions = [s for s in self._subscriptions if s is not subscription]
            self.dropped_by_departed += subscription.dropped

    def publish(self, item: T) -> None:
        subscriptions = self._subscriptions  # copy-on-write: no lock on the hot path
        loops: dict[asyncio.AbstractEventLoop, list[Subscription[T]]] = {}
        for subscription in subscriptions:
            subscription.push(item)
            loops.setdefault(subscription.loop, []).append(subscription)
        for loop, members in loops.items():
            with contextlib.suppress(RuntimeError):  # a loop that has closed has no one left to wake
                loop.call_soon_threadsafe(_wake_all, members)

    def close(self) -> None:
        with self._lock:
            self.closed = True
        for subscription in self._subscriptions:
            subscription.close()

    @property
    def subscribers(self) -> int:
        return len(self._subscriptions)

    @property
    def dropped(self) -> int:
        return self.dropped_by_departed + sum(s.dropped for s in self._subscriptions)


def _wake_all(subscriptions: list[Subscription[T]]) -> None:
    for subscription in subscriptions:
        subscription.wake()
