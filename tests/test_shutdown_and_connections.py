"""A real server on loopback: SIGTERM with viewers connected, and clients that try to hold it."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time

import httpx
import psutil
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.conftest import VTEST
from tests.server import running_server
from tests.test_watchdogs import wait_for


def _sse_client(port: int, started: threading.Event, lines: list[bytes]) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /api/v1/streams/main/events HTTP/1.1\r\nHost: localhost\r\n\r\n")
        while chunk := sock.recv(65536):
            lines.append(chunk)
            started.set()


@pytest.mark.process
def test_sigterm_with_mjpeg_sse_and_websocket_clients_exits_promptly(tmp_path):
    with running_server(["--source", str(VTEST), "--loop"], tmp_path / "log") as server:
        server.wait_until("/health/ready")
        mjpeg = httpx.stream("GET", f"{server.base}/api/v1/streams/main/video.mjpg", timeout=60)
        response = mjpeg.__enter__()
        assert next(response.iter_bytes()).startswith(b"--frame")
        sse_started, sse_data = threading.Event(), []
        sse = threading.Thread(target=_sse_client, args=(server.port, sse_started, sse_data), daemon=True)
        sse.start()
        assert sse_started.wait(60)
        with connect(f"ws://127.0.0.1:{server.port}/api/v1/streams/main/ws", open_timeout=60) as websocket:
            assert '"stream": "main"' in websocket.recv(timeout=60)
            sent = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            returncode = server.process.wait(60)  # uvicorn alone would wait for these clients forever
            elapsed = time.monotonic() - sent
            closed_with = None
            try:
                while True:
                    websocket.recv(timeout=30)
            except ConnectionClosed as exc:
                closed_with = exc.rcvd.code if exc.rcvd else None
        sse.join(30)
        mjpeg.__exit__(None, None, None)
        log = server.log
    print(f"SIGTERM with MJPEG, SSE and WebSocket clients: exited in {elapsed:.2f} s")
    # uvicorn re-raises the signal once it has shut down cleanly, so the exit reads as "terminated by SIGTERM"
    assert returncode in (0, -signal.SIGTERM) and not sse.is_alive()
    # generous for a loaded machine, and still far below "waits for its clients forever"
    assert elapsed < 30
    # a close frame, not a dropped socket: 1001 "going away", as the README promises (not uvicorn's 1012)
    assert closed_with == 1001
    assert "cameras and accelerators released" in log and "Traceback" not in log


@pytest.mark.process
def test_an_upload_still_running_when_shutdown_time_is_up_gets_a_503_to_retry_not_a_500(tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text(f"server: {{shutdown_timeout_s: 1}}\nstreams:\n  - {{id: main, source: {VTEST}, loop: true}}\n")
    with running_server(["--config", str(config)], tmp_path / "log") as server:
        server.wait_until("/health/ready")
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
            head = b"POST /api/v1/detect HTTP/1.1\r\nHost: localhost\r\nContent-Type: image/jpeg\r\n"
            sock.sendall(head + b"Content-Length: 500000\r\n\r\n" + b"\xff" * 1000)  # the rest never comes
            wait_for(lambda: server.client.get("/api/v1/stats").status_code == 200, "the upload to be taken in")
            server.process.send_signal(signal.SIGTERM)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        server.process.wait(60)
        log = server.log
    status, _, rest = answer.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 503"), answer[:300]
    assert b"retry-after: 10" in rest.lower() and b"send the image again" in rest
    assert "Traceback" not in log and "CancelledError" not in log


@pytest.mark.process
def test_sources_stuck_opening_do_not_hold_up_shutdown(tmp_path):
    """Cameras that accept the connection and never answer: FFmpeg's open cannot be interrupted, so shutdown
    leaves those threads to close their sources whenever the open returns, instead of waiting on each in turn."""
    silent = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    threading.Thread(target=lambda: [held.append(silent.accept()[0]) for _ in range(64)], daemon=True).start()
    port = silent.getsockname()[1]
    stuck = "".join(
        f"  - {{id: s{i}, source: '{scheme}://127.0.0.1:{port}/cam{i}'}}\n"
        for i, scheme in enumerate(["http", "rtsp", "http", "rtsp"])
    )
    config = tmp_path / "serve.yaml"
    config.write_text(f"streams:\n  - {{id: main, source: {VTEST}, loop: true}}\n{stuck}")
    try:
        with running_server(["--config", str(config)], tmp_path / "log") as server:
            # the file opens while the cameras hang (OpenCV's FFmpeg open lock would hold it for their timeout)
            server.wait_until("/health/ready", timeout=120)
            server.wait_for_frames("main", 1, timeout=120)
            wait_for(lambda: len(held) >= 4, "every stuck camera to be connected to")
            streams = {s["id"]: s for s in server.client.get("/api/v1/streams").json()}
            assert all(streams[f"s{i}"]["state"] in ("connecting", "reconnecting") for i in range(4)), streams
            sent = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            server.process.wait(60)
            elapsed = time.monotonic() - sent
            log = server.log
    finally:
        silent.close()
        for sock in held:
            sock.close()
    print(f"SIGTERM with 4 sources stuck opening: exited in {elapsed:.2f} s")
    assert "sources still opening were left to close themselves" in log and "Traceback" not in log
    assert elapsed < 30


def _whole_response(sock: socket.socket) -> bytes:
    """One response with a content-length, read to its last byte, and not a byte of what follows."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length"))
    while len(body) < length:
        body += sock.recv(4096)
    return head + b"\r\n\r\n" + body


@pytest.mark.process
@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_clients_cannot_hold_the_service_with_either_http_parser(tmp_path, parser):
    """The clocks live in the protocol, and each parser says in its own way when a request's header is whole."""
    config = tmp_path / "streams.yaml"
    config.write_text(
        f"server:\n  header_timeout_s: 1\n  send_timeout_s: 2\n  http: {parser}\n"
        f"streams:\n  - id: main\n    source: {VTEST}\n    loop: true\n    pace: false\n"
    )
    with running_server(["--config", str(config)], tmp_path / "log") as server:
        server.wait_until("/health/ready")
        # half a request header, then silence: closed by the header clock, not held forever
        half = socket.create_connection(("127.0.0.1", server.port))
        half.sendall(b"GET /api/v1/streams HTTP/1.1\r\nHost: local")
        half.settimeout(60)
        assert half.recv(1024) == b""
        half.close()

        # a keep-alive connection: a whole request is answered, then half of the next one meets the same clock
        kept = socket.create_connection(("127.0.0.1", server.port))
        kept.settimeout(60)
        kept.sendall(b"GET /health/live HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert _whole_response(kept).startswith(b"HTTP/1.1 200")
        kept.sendall(b"GET /api/v1/streams HTTP/1.1\r\nHost: local")
        assert kept.recv(1024) == b""
        kept.close()

        # a viewer that never reads is cut once the kernel's buffers are full and send_timeout_s passes
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(("127.0.0.1", server.port))
        stalled.sendall(b"GET /api/v1/streams/main/video.mjpg?fps=60&quality=100 HTTP/1.1\r\nHost: localhost\r\n\r\n")
        subscribers = lambda: server.client.get("/api/v1/streams").json()[0]["subscribers"]  # noqa: E731
        wait_for(lambda: subscribers() == 1, "the stalled viewer to subscribe")
        wait_for(lambda: subscribers() == 0, "the stalled viewer to be cut", timeout=180, every=0.5)
        assert "cut a client of /api/v1/streams/main/video.mjpg that took nothing for 2 s" in server.log
        stalled.close()

        # a slow but whole request is not cut: the clock stops once the header is complete
        slow = socket.create_connection(("127.0.0.1", server.port))
        slow.settimeout(60)
        slow.sendall(b"GET /api/v1/streams/main/events HTTP/1.1\r\nHost: localhost\r\n\r\n")
        time.sleep(2.5)  # past the header clock: a stream that began must go on
        assert slow.recv(4096).startswith(b"HTTP/1.1 200")
        slow.close()


@pytest.mark.process
def test_streaming_clients_are_capped_per_stream(tmp_path):
    config = tmp_path / "streams.yaml"
    config.write_text(
        "server:\n  max_clients_per_stream: 2\n"
        f"streams:\n  - id: main\n    source: {VTEST}\n    loop: true\n    pace: false\n"
    )
    with running_server(["--config", str(config)], tmp_path / "log") as server:
        server.wait_until("/health/ready")
        # at most max_clients_per_stream streaming clients per stream; the next one is told to come back
        with (
            server.client.stream("GET", "/api/v1/streams/main/events") as first,
            server.client.stream("GET", "/api/v1/streams/main/events") as second,
        ):
            assert first.status_code == second.status_code == 200
            third = server.client.get("/api/v1/streams/main/video.mjpg")
            assert third.status_code == 503 and third.headers["Retry-After"].isdigit()
            assert "max_clients_per_stream" in third.json()["detail"]
        with (  # dashboards' live channels are bounded the same way
            server.client.stream("GET", "/api/v1/live") as one,
            server.client.stream("GET", "/api/v1/live") as two,
        ):
            assert one.status_code == two.status_code == 200
            third = server.client.get("/api/v1/live")
            assert third.status_code == 503 and third.headers["Retry-After"].isdigit()
            assert third.json()["detail"].startswith("the live channel (dashboards) already has 2 streaming clients")

        def slot_free() -> bool:
            with server.client.stream("GET", "/api/v1/streams/main/video.mjpg") as again:
                return again.status_code == 200

        wait_for(slot_free, "the slots to be given back once those clients left")
        assert server.client.get("/health/live").status_code == 200

        # a WebSocket beyond the limit is refused at the handshake like the others: 503 with Retry-After
        with (
            connect(f"ws://127.0.0.1:{server.port}/api/v1/streams/main/ws", open_timeout=60),
            connect(f"ws://127.0.0.1:{server.port}/api/v1/streams/main/ws", open_timeout=60),
        ):
            with pytest.raises(InvalidStatus) as refused:
                connect(f"ws://127.0.0.1:{server.port}/api/v1/streams/main/ws", open_timeout=60)
            answer = refused.value.response
            assert answer.status_code == 503 and answer.headers["Retry-After"].isdigit()
            assert b"max_clients_per_stream" in answer.body


@pytest.mark.process
@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_the_connection_cap_answers_with_retry_after_and_never_to_the_health_probes(tmp_path, parser):
    """Anyone able to open max_connections sockets must not get a healthy service restarted by its probes."""
    config = tmp_path / "streams.yaml"
    config.write_text(
        f"server:\n  header_timeout_s: 60\n  max_connections: 6\n  http: {parser}\n"
        f"streams:\n  - id: main\n    source: {VTEST}\n    loop: true\n"
    )
    with running_server(["--config", str(config)], tmp_path / "log") as server:
        server.wait_until("/health/ready")
        held = []
        for _ in range(8):  # half a request header each, then silence
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.sendall(b"GET /api/v1/streams HTTP/1.1\r\nHost: local")
            held.append(sock)
        try:
            with httpx.Client(base_url=server.base, timeout=30) as client:
                busy = client.get("/api/v1/streams")
                assert busy.status_code == 503 and busy.headers["Retry-After"].isdigit()
                assert "max_connections" in busy.text
                assert client.get("/health/live").status_code == 200
                assert client.get("/health/ready").status_code == 200
        finally:
            for sock in held:
                sock.close()


def test_an_http_parser_that_is_not_installed_is_one_line(monkeypatch):
    import importlib.util

    from edge_inference.edge.errors import EdgeError
    from edge_inference.service.server import GuardedH11Protocol, guarded_protocol

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "httptools" else found(name, *a))
    assert guarded_protocol("auto") is GuardedH11Protocol  # auto falls back, as uvicorn's own auto does
    with pytest.raises(EdgeError, match=r"^server.http is httptools, which is not installed: pip install httptools"):
        guarded_protocol("httptools")


@pytest.mark.process
def test_accepted_connections_have_nagle_off():
    """The listening socket edge serve makes must say TCP, or asyncio leaves Nagle on and every answer waits ~40 ms."""
    import asyncio

    from edge_inference.cli.listening import bind

    listener = bind("127.0.0.1", 0)
    options = []

    async def scenario() -> None:
        async def accepted(reader, writer):
            sock = writer.get_extra_info("socket")
            options.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(accepted, sock=listener)
        _, writer = await asyncio.open_connection("127.0.0.1", listener.getsockname()[1])
        while not options:
            await asyncio.sleep(0.01)
        writer.close()
        server.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))
    assert options == [1]


def _flood(port: int, payload: bytes) -> None:
    """`payload` sent on one connection that never reads an answer, until the server stops taking it."""
    with socket.create_connection(("127.0.0.1", port)) as flood:
        flood.settimeout(20)  # h11 reads the next request only once one is answered: the kernel's buffers fill
        with contextlib.suppress(OSError):  # closed by the server, or full
            flood.sendall(payload)


def _answer_to(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(60)
        sock.sendall(request)
        said = b""
        with contextlib.suppress(OSError):  # a server that refuses closes, and may reset what was not read
            while chunk := sock.recv(65536):
                said += chunk
        return said


@pytest.mark.process
@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_pipelined_floods_and_huge_headers_are_bounded_on_either_parser(tmp_path, parser):
    """On httptools (the default) one connection pipelining 200,000 `GET /health/live` without reading took the
    service from 274 to 595 MB and kept most of it; a 1 MB header and 20,000 headers were answered 200. Now what
    a client sends is bounded before it is stored, as h11 already bounds it, and everyone else is still served."""
    config = tmp_path / "streams.yaml"
    config.write_text(f"server:\n  http: {parser}\nstreams:\n  - id: main\n    source: {VTEST}\n    loop: true\n")
    with running_server(["--config", str(config)], tmp_path / "log") as server:
        server.wait_until("/health/ready")
        server.wait_for_frames("main", 30, timeout=240)  # the engine's own memory settled before the baseline
        service = psutil.Process(server.process.pid)
        before = service.memory_info().rss
        pipelined = b"GET /health/live HTTP/1.1\r\nHost: localhost\r\n\r\n" * 100_000
        flooders = [threading.Thread(target=_flood, args=(server.port, pipelined)) for _ in range(10)]
        for flooder in flooders:
            flooder.start()
        assert server.client.get("/health/live", timeout=60).status_code == 200  # served meanwhile
        for flooder in flooders:
            flooder.join(timeout=120)
        grown = service.memory_info().rss - before
        assert grown < 48 * 2**20, f"the service grew {grown / 2**20:.0f} MiB under 10 pipelining connections"

        huge = _answer_to(
            server.port, b"GET /health/live HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"a" * 2**20 + b"\r\n\r\n"
        )
        many = b"".join(b"X-H%d: v\r\n" % n for n in range(20_000))
        lots = _answer_to(server.port, b"GET /health/live HTTP/1.1\r\nHost: localhost\r\n" + many + b"\r\n")
        for said in (huge, lots):  # httptools: 431; h11: its own 400 for a head over 16 KiB
            assert said.startswith((b"HTTP/1.1 431 ", b"HTTP/1.1 400 ")), said[:200]
        long_target = _answer_to(server.port, b"GET /" + b"a" * 2**20 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert long_target.startswith((b"HTTP/1.1 414 ", b"HTTP/1.1 400 ")), long_target[:200]
        assert server.client.get("/health/live").status_code == 200


def _answer_then_closed(port: int, request: bytes) -> tuple[bytes, bool]:
    """What the server answered, and whether it closed the connection after (rather than keep it for more)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(60)
        sock.sendall(request)
        said = b""
        try:
            while chunk := sock.recv(65536):
                said += chunk
        except TimeoutError:
            return said, False
        except OSError:  # reset after the answer: closed too
            pass
        return said, True


AMBIGUOUS = {
    "two Host headers": b"GET /health/live HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n\r\n",
    "Content-Length and Transfer-Encoding": (
        b"POST /api/v1/detect HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\n"
    ),
    "an absolute URI naming another host": b"GET http://evil.example/health/live HTTP/1.1\r\nHost: localhost\r\n\r\n",
}


@pytest.mark.process
@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_ambiguous_framing_is_refused_and_its_connection_closed_on_either_parser(tmp_path, parser):
    """Two Host headers (one allowed, one not) and an absolute-form URI naming another host were answered 200; h11
    read a request with both Content-Length and Transfer-Encoding and kept the connection open for the next."""
    config = tmp_path / "streams.yaml"
    config.write_text(f"server:\n  http: {parser}\nstreams:\n  - id: main\n    source: {VTEST}\n    loop: true\n")
    with running_server(["--config", str(config)], tmp_path / "log") as server:
        server.wait_until("/health/live")
        for case, request in AMBIGUOUS.items():
            said, closed = _answer_then_closed(server.port, request)
            assert said.startswith(b"HTTP/1.1 400 ") and closed, (case, said[:300])
        plain = b"GET /health/live HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        assert _answer_then_closed(server.port, plain)[0].startswith(b"HTTP/1.1 200 ")  # a plain one: answered
