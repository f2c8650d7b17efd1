"""The service's Server-Sent Events response on a real uvicorn over loopback: one write per chunk, a ping only when a
stream is quiet, and the client's slot given back when it goes."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from edge_inference.service.streaming import EventStream

pytestmark = pytest.mark.process


class Feed:
    """What the test's stream sends: chunks put from the test's thread, read on the server's loop."""

    def __init__(self) -> None:
        self.ping_s = 0.3
        self.chunks: asyncio.Queue[bytes] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = threading.Event()

    def put(self, chunk: bytes) -> None:
        assert self.loop is not None and self.chunks is not None
        self.loop.call_soon_threadsafe(self.chunks.put_nowait, chunk)

    async def endpoint(self, request: Request) -> EventStream:
        self.loop, self.chunks = asyncio.get_running_loop(), asyncio.Queue()
        chunks = self.chunks

        async def generate() -> AsyncIterator[bytes]:
            while True:
                yield await chunks.get()

        return EventStream(generate(), on_close=self.closed.set, ping_s=self.ping_s)


def wait_for(condition: Callable[[], object], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.05)


@pytest.fixture
def served() -> Iterator[tuple[Feed, int]]:
    feed = Feed()
    app = Starlette(routes=[Route("/events", feed.endpoint)])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, "uvicorn to listen", timeout=60)
    yield feed, port
    server.should_exit = True
    thread.join(30)


def connect(port: int) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", port), timeout=60)
    client.sendall(b"GET /events HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n")
    return client


def read_until(client: socket.socket, marker: bytes, received: bytearray) -> bytes:
    while marker not in received:
        chunk = client.recv(65536)
        assert chunk, f"the stream ended before {marker!r}: {bytes(received)!r}"
        received += chunk
    return bytes(received)


def test_a_quiet_stream_is_pinged_and_data_follows(served):
    feed, port = served
    with connect(port) as client:
        received = bytearray()
        head = read_until(client, b"\r\n\r\n", received).lower()
        assert b"content-type: text/event-stream" in head and b"cache-control: no-store" in head
        read_until(client, b": ping\r\n\r\n", received)  # nothing to send for ping_s: a comment keeps proxies open
        feed.put(b"event: detections\r\ndata: {}\r\n\r\n")
        assert b"data: {}" in read_until(client, b"data: {}\r\n\r\n", received)


def test_no_ping_while_data_flows_and_the_slot_is_given_back_on_leaving(served):
    """A ping is a write too: a stream carrying frames sends none. A client that hangs up ends the response and runs
    its clean-up (the stream's subscription and the client's slot)."""
    feed, port = served
    feed.ping_s = 1.5
    with connect(port) as client:
        received = bytearray()
        read_until(client, b"\r\n\r\n", received)
        # a chunk every 0.1 s for four ping intervals: a stream that pinged on a timer would have sent four; a stall
        # of the machine longer than ping_s between two chunks would let one through, so one is allowed
        for index in range(60):
            feed.put(f"data: {index}\r\n\r\n".encode())
            time.sleep(0.1)
        body = read_until(client, b"data: 59\r\n\r\n", received)
        assert body.count(b": ping") <= 1, body
        assert not feed.closed.is_set()
    wait_for(feed.closed.is_set, "the response to end when its client left", timeout=60)
