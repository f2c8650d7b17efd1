"""Bounds on what clients can make the service hold: streaming viewers per stream, uploads in flight and queued."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import HTTPException

RETRY_AFTER_S = 2


def busy(message: str) -> HTTPException:
    return HTTPException(503, message, headers={"Retry-After": str(RETRY_AFTER_S)})


class ClientSlots:
    """At most `per_stream` streaming clients (SSE, WebSocket, MJPEG) on each stream; one event loop owns it."""

    def __init__(self, per_stream: int) -> None:
        self.per_stream = per_stream
        self.in_use: Counter[str] = Counter()

    def take(self, stream_id: str, what: str | None = None) -> None:
        if self.in_use[stream_id] >= self.per_stream:
            raise busy(
                f"{what or 'stream ' + stream_id} already has {self.per_stream} streaming clients "
                "(max_clients_per_stream); close a viewer or raise the limit"
            )
        self.in_use[stream_id] += 1

    def give_back(self, stream_id: str) -> None:
        self.in_use[stream_id] = max(0, self.in_use[stream_id] - 1)


class UploadGate:
    """`workers` uploads read, decoded and detected at once, `queue` more waiting; beyond that 503 at once."""

    def __init__(self, workers: int, queue: int) -> None:
        self.workers, self.queue = workers, queue
        self.active = self.waiting = self.refused = 0
        self._free: asyncio.Semaphore | None = None  # made on the serving loop

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self._free is None:
            self._free = asyncio.Semaphore(self.workers)
        if self.active >= self.workers and self.waiting >= self.queue:
            self.refused += 1
            raise busy(
                f"busy: {self.active} uploads are being processed and {self.waiting} are waiting; try again shortly"
            )
        self.waiting += 1
        try:
            await self._free.acquire()
        finally:
            self.waiting -= 1
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1
            self._free.release()
