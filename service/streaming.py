"""Streaming responses that clean up as soon as they end, however they end.

When a client disconnects or is cut for not reading, Starlette abandons the body generator mid-`yield` without
closing it, so its `finally` (unsubscribing from the stream) would run only whenever the garbage collector gets
to it, and the client's slot would stay taken. These responses close the generator and give the slot back on
every way out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

PING_S = 15.0  # a comment line after this long without data: proxies close a connection quiet for a minute or so


class _ClosesWhenDone:
    body_iterator: Any

    def __init__(self, *args: Any, on_close: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)  # type: ignore[misc]
        finally:
            try:
                aclose = getattr(self.body_iterator, "aclose", None)
                if aclose is not None:
                    await aclose()
            finally:
                self.on_close()


class ClosingStreamingResponse(_ClosesWhenDone, StreamingResponse):
    pass


class EventStream(_ClosesWhenDone, StreamingResponse):
    """Server-Sent Events, encoded by the caller (once for every client), each chunk one `send` and nothing more.

    sse-starlette's response wraps every write in a cancel scope, a conversion and a log call, which 50 dashboards
    pay 500 times a second (issue 62); a client that stops reading is cut by the server's send clock
    (server.py) instead. A ping, a comment line, goes out only when nothing else did for `ping_s`."""

    media_type = "text/event-stream"

    def __init__(
        self,
        content: AsyncIterator[bytes],
        status_code: int = 200,  # FastAPI's OpenAPI reads a response class's status from here
        *,
        on_close: Callable[[], None] = lambda: None,
        ping_s: float = PING_S,
    ) -> None:
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}  # no proxy holds events back
        super().__init__(content, status_code, headers=headers, on_close=on_close)
        self.ping_s = ping_s
        self._written = 0.0  # loop time of the last write

    async def stream_response(self, send: Send) -> None:
        loop = asyncio.get_running_loop()
        self._written = loop.time()
        pinging = asyncio.create_task(self._ping(send, loop))
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async for chunk in self.body_iterator:
                self._written = loop.time()
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            pinging.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pinging

    async def _ping(self, send: Send, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            await asyncio.sleep(max(0.0, self._written + self.ping_s - loop.time()))
            if loop.time() - self._written >= self.ping_s:
                self._written = loop.time()
                await send({"type": "http.response.body", "body": b": ping\r\n\r\n", "more_body": True})
