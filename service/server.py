"""uvicorn, run so that no client can hold the service: header and send clocks, a connection cap, quick shutdown.

- uvicorn's keep-alive clock starts only after a first response, so a connection that sends half a request header
  is held forever; the guarded protocol closes it after `header_timeout_s` (also between keep-alive requests).
  The guards sit on either of uvicorn's HTTP protocols (`server.http`): httptools where it is installed, h11 else.
- A streaming client that takes no data for `send_timeout_s` is cut: the transport tells the protocol when its
  buffer is full (`pause_writing`) and when the client has taken enough of it (`resume_writing`); a pause longer
  than `send_timeout_s` aborts the connection. A clock on the pause, not on every write: a timeout scope around
  each send cost more than the write itself (30 us a write, 600 writes a second with 20 clients at 30 fps).
- The connection cap (`max_connections`) is applied here rather than by uvicorn, so that it answers 503 with
  Retry-After (uvicorn's own answer has none) and never to the health probes: anyone able to open that many sockets
  must not get a healthy service restarted by its HEALTHCHECK or systemd.
- On SIGTERM or Ctrl-C, `EdgeServer` ends every stream at once (SSE and MJPEG responses finish, WebSockets close
  with 1001 "going away") before uvicorn waits for connections, and `timeout_graceful_shutdown` bounds the rest.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import socket
from types import FrameType
from typing import TYPE_CHECKING, Any

import h11
import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from edge_inference.edge.config import ServiceConfig
from edge_inference.edge.errors import EdgeError

log = logging.getLogger("edge.server")


WEBSOCKET_CLOSE_S = 1.0
PROBE_PATHS = frozenset({"/health/live", "/health/ready"})
RETRY_AFTER_S = 2


async def _at_capacity(scope: Scope, receive: Receive, send: Send) -> None:
    body = b"the service is at its connection limit (server.max_connections); try again shortly\n"
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(RETRY_AFTER_S).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


if TYPE_CHECKING:

    class _Protocol(asyncio.Protocol):
        """What the guards use of a uvicorn HTTP protocol: h11's and httptools' both have it."""

        loop: asyncio.AbstractEventLoop
        transport: asyncio.Transport
        connections: set[Any]
        tasks: set[asyncio.Task[None]]

        def on_response_complete(self) -> None: ...
else:
    _Protocol = object


class _Guards(_Protocol):
    """The clocks and the cap, for either of uvicorn's HTTP protocols; each says when a request's header is whole."""

    header_timeout_s = 10.0
    send_timeout_s = 30.0
    max_connections: int | None = None

    # uvicorn reads `limit_concurrency` and `app` when a request's head has arrived (scope set): the cap is ours.
    @property
    def limit_concurrency(self) -> int | None:
        return None

    @limit_concurrency.setter
    def limit_concurrency(self, value: int | None) -> None:
        pass

    @property
    def app(self) -> ASGIApp:
        cap = self.max_connections
        scope = getattr(self, "scope", None) or {}
        busy = cap is not None and (len(self.connections) >= cap or len(self.tasks) >= cap)
        return _at_capacity if busy and scope.get("path") not in PROBE_PATHS else self._edge_app

    @app.setter
    def app(self, value: ASGIApp) -> None:
        self._edge_app = value

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_clock: asyncio.TimerHandle | None = None
        self._send_clock: asyncio.TimerHandle | None = None
        self._arm_header_clock()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_clock is None:
            self._send_clock = self.loop.call_later(self.send_timeout_s, self._send_timed_out)

    def resume_writing(self) -> None:
        self._disarm_send_clock()
        super().resume_writing()

    def _disarm_send_clock(self) -> None:
        self._cancel_clock("_send_clock")

    def _cancel_clock(self, attribute: str) -> None:
        clock = getattr(self, attribute, None)  # absent until connection_made
        if clock is not None:
            clock.cancel()
            setattr(self, attribute, None)

    def _send_timed_out(self) -> None:
        self._send_clock = None
        if not self.transport.is_closing():
            path = (getattr(self, "scope", None) or {}).get("path", "?")
            log.info("cut a client of %s that took nothing for %g s", path, self.send_timeout_s)
            self.transport.abort()  # close() would wait for a buffer the client never takes

    def _arm_header_clock(self) -> None:
        self._disarm_header_clock()
        self._header_clock = self.loop.call_later(self.header_timeout_s, self._header_timed_out)

    def _disarm_header_clock(self) -> None:
        """A whole request header arrived (the protocol's own parser says when)."""
        self._cancel_clock("_header_clock")

    def _header_timed_out(self) -> None:
        self._header_clock = None
        if not self.transport.is_closing():
            log.info("closing a connection that sent no complete request header for %g s", self.header_timeout_s)
            self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_header_clock()  # the next request on this connection gets the same clock

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_clock()
        self._disarm_send_clock()
        super().connection_lost(exc)


class GuardedH11Protocol(_Guards, H11Protocol):
    """h11, pure Python: the fallback where httptools does not install."""

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._header_clock is not None and self.conn.their_state is not h11.IDLE:
            self._disarm_header_clock()


# What one request may send before it is answered, on httptools (h11 holds a request's head to 16 KiB itself, and
# reads the next request only once one is answered): a request line, its headers, and requests pipelined behind it.
MAX_URL_BYTES = 8 * 1024
MAX_HEADER_BYTES = 32 * 1024  # all of a request's header lines together (nginx: 4 x 8 KiB)
MAX_HEADERS = 100
MAX_PIPELINED = 16  # requests parsed and waiting behind the one being answered, on one connection
STATUS_TEXT = {400: b"Bad Request", 414: b"URI Too Long", 431: b"Request Header Fields Too Large"}


def _httptools_protocol() -> type[_Guards]:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(_Guards, HttpToolsProtocol):
        """httptools (llhttp, in C), uvicorn's own default: the event loop spends 16-17 us per streaming client and
        frame on it, 20-21 on h11 (`benchmarks/viewers.py --http httptools,h11`).

        uvicorn's httptools protocol stores whatever arrives: a request line and headers of any size, and every
        request pipelined behind the one being answered (one read of 256 KiB holds thousands, and it reads on after
        each answer): 200,000 pipelined requests on one connection took the service from 274 to 595 MB. Here a
        request's line and headers are counted as the parser hands them over and refused past their bounds (414,
        431), and a connection with more than MAX_PIPELINED requests waiting is closed."""

        def on_message_begin(self) -> None:
            self._head_bytes = self._header_count = 0
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            if self.transport.is_closing():
                return
            if not self.url and url[:1] not in (b"/", b"*"):  # uvicorn keeps only an absolute URI's path
                self._refuse(400, "a request's target is a path, not an absolute URI (service/framing.py)")
                return
            if len(self.url) + len(url) > MAX_URL_BYTES:
                self._refuse(414, f"the request's target is over {MAX_URL_BYTES // 1024} KiB")
                return
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            if self.transport.is_closing():
                return
            self._head_bytes += len(name) + len(value) + 4
            self._header_count += 1
            if self._head_bytes > MAX_HEADER_BYTES or self._header_count > MAX_HEADERS:
                self._refuse(431, f"a request's headers are bounded: {MAX_HEADERS}, {MAX_HEADER_BYTES // 1024} KiB")
                return
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            if self.transport.is_closing():
                return  # refused above, or the connection is going: no request to start
            self._disarm_header_clock()
            super().on_headers_complete()
            if len(self.pipeline) > MAX_PIPELINED:
                log.info("closing a connection that pipelined over %d requests without reading", MAX_PIPELINED)
                self.pipeline.clear()
                self.transport.close()

        def on_body(self, body: bytes) -> None:
            if not self.transport.is_closing():
                super().on_body(body)

        def on_message_complete(self) -> None:
            if not self.transport.is_closing():
                super().on_message_complete()

        def _refuse(self, status: int, why: str) -> None:
            """An answer of our own, where no response is under way on this connection, then the end of it."""
            if self.cycle is None or self.cycle.response_complete:
                body = f"{why}\n".encode()
                head = b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n" % (
                    status,
                    STATUS_TEXT[status],
                    len(body),
                )
                self.transport.write(head + b"connection: close\r\n\r\n" + body)
            log.info("refused a request (%d): %s", status, why)
            self.transport.close()

    return GuardedHttpToolsProtocol


def guarded_protocol(parser: str) -> type[_Guards]:
    """The guarded protocol for `server.http`: auto is httptools where it is installed, as uvicorn's `--http auto`."""
    installed = importlib.util.find_spec("httptools") is not None
    if parser == "h11" or (parser == "auto" and not installed):
        return GuardedH11Protocol
    if not installed:
        raise EdgeError("server.http is httptools, which is not installed: pip install httptools (or http: auto)")
    return _httptools_protocol()


class EdgeServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self.edge_app = app

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            log.info("stopping: ending client streams, then releasing cameras and accelerators")
            shutdown = getattr(self.edge_app.state, "shutdown", None)
            if shutdown is not None:
                shutdown.set()
            self.edge_app.state.manager.begin_stop()
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Let WebSockets end with 1001 "going away" (their streams are ending) before uvicorn closes what is left
        with 1012 "service restart"; a second at most."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WEBSOCKET_CLOSE_S
        while getattr(self.edge_app.state, "websockets", 0) > 0 and loop.time() < deadline:
            await asyncio.sleep(0.02)
        await super().shutdown(sockets)


def make_server(app: FastAPI, config: ServiceConfig, log_level: str) -> EdgeServer:
    server = config.server
    protocol = type(
        "Protocol",
        (guarded_protocol(server.http),),
        {
            "header_timeout_s": server.header_timeout_s,
            "send_timeout_s": server.send_timeout_s,
            "max_connections": server.max_connections,
        },
    )
    uvicorn_config = uvicorn.Config(
        app,
        host=server.host,
        port=server.port,
        log_level=log_level,
        access_log=False,
        http=protocol,
        timeout_keep_alive=server.keep_alive_timeout_s,
        timeout_graceful_shutdown=server.shutdown_timeout_s,
    )
    return EdgeServer(uvicorn_config, app)
