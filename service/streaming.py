"""Streaming responses that clean up as soon as they end, however they end.

When a client disconnects or is cut for not reading, Starlette abandons the body generator mid-`yield` without
closing it, so its `finally` (unsubscribing from the stream) would run only whenever the garbage collector gets
to it, and the client's slot would stay taken. These responses close the generator and give the slot back on
every way out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sse_starlette.sse import EventSourceResponse
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


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


class ClosingEventSourceResponse(_ClosesWhenDone, EventSourceResponse):
    pass
