"""The fault and bad-input matrix: each case against a real `edge serve` on loopback, with the service watched.

    python -m benchmarks.faults            (about two minutes; prints a Markdown table for RELIABILITY.md)

For every case: what the client or the operator got, the p95 of `GET /api/v1/streams` polled every 20 ms
while the case ran (is the service still answering?), the server's RSS before and after, and anything lost.
Recovery times are measured from the fault's end to the first new detection. Traffic goes to loopback only.
"""

from __future__ import annotations

import concurrent.futures
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from benchmarks.common import MODELS, SHARED, VTEST, machine, pct
from benchmarks.fault_rows import Row, Served, measured
from benchmarks.hostile import jpeg_claiming, png_bomb, serve_flapping_camera, serve_stalling_camera

PHOTO = SHARED / "media" / "kite_and_cold.jpg"  # a real 1.4 MB photo
SSD = str(MODELS / "onnx" / "ssd_mobilenet_v2_coco_quant_postprocess.onnx")
REPEAT = 10


def post(server: Served, data: bytes, content_type: str = "application/octet-stream") -> tuple[int, float]:
    t0 = time.perf_counter()
    status = server.client.post("/api/v1/detect", content=data, headers={"Content-Type": content_type}).status_code
    return status, time.perf_counter() - t0


def upload_cases(server: Served) -> list[Row]:
    rows = []
    for case, data in [
        ("PNG 30000x30000 (1-bit, 109 KB)", png_bomb(30000)),
        ("PNG 33000x33000 (1-bit, 132 KB)", png_bomb(33000)),
        ("PNG 30000x30000 with a damaged ancillary chunk (bad CRC)", png_bomb(30000, bad_crc=True)),
        ("JPEG header claiming 65000x65000", jpeg_claiming(65000, 65000)),
        ("truncated JPEG (half of a 1.4 MB photo)", PHOTO.read_bytes()[: PHOTO.stat().st_size // 2]),
        ("not an image (text)", b"hello, this is not an image" * 10),
        ("empty body", b""),
        ("25 MB body (limit 20 MB)", b"\0" * 25_000_000),
    ]:

        def send(data: bytes = data) -> tuple[str, str]:
            answers = [post(server, data) for _ in range(REPEAT)]  # repeated, so the probe sees it happen
            statuses = sorted({status for status, _ in answers})
            slowest = max(seconds for _, seconds in answers)
            return f"{'/'.join(map(str, statuses))} (x{REPEAT}, slowest {slowest:.2f} s)", "-"

        rows.append(measured(server, f"upload: {case}", send))

    def flood() -> tuple[str, str]:
        photo = PHOTO.read_bytes()
        with concurrent.futures.ThreadPoolExecutor(50) as pool:
            statuses = list(pool.map(lambda _: post(server, photo, "image/jpeg")[0], range(50)))
        counts = {s: statuses.count(s) for s in sorted(set(statuses))}
        other = sum(n for s, n in counts.items() if s not in (200, 503))
        return ", ".join(f"{n}x {s}" for s, n in counts.items()), f"{other} failed (503s carry Retry-After)"

    rows.append(measured(server, "upload: 50 concurrent 1.4 MB photos", flood))
    return rows


def connection_cases(server: Served) -> list[Row]:
    rows = []

    def long_id() -> tuple[str, str]:
        answer = server.client.get(f"/api/v1/streams/{'x' * 60_000}/detections/latest")
        return f"{answer.status_code}, {len(answer.content)} byte body", "-"

    rows.append(measured(server, "GET with a 60 KB stream id", long_id))

    def half_headers() -> tuple[str, str]:
        fds = server.fds()
        socks = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(200)]
        for sock in socks:
            sock.sendall(b"GET /api/v1/streams HTTP/1.1\r\nHost: loc")
            sock.settimeout(60)
        t0 = time.monotonic()
        closed = sum(sock.recv(16) == b"" for sock in socks)
        took = time.monotonic() - t0
        for sock in socks:
            sock.close()
        server.wait(lambda: server.fds() <= fds + 5, 30)
        return f"{closed}/200 closed by the server in {took:.1f} s", f"fds {fds} -> {server.fds()}"

    rows.append(measured(server, "200 connections sending half a header", half_headers))

    def stalled_viewers() -> tuple[str, str]:
        fds = server.fds()
        socks = []
        for path in ["video.mjpg?quality=100&fps=60"] * 8 + ["events"] * 8:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", server.port))
            sock.sendall(f"GET /api/v1/streams/main/{path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
            socks.append(sock)
        server.wait(lambda: server.stream()["subscribers"] >= 16, 60)
        over = server.client.get("/api/v1/streams/main/events").status_code  # limit is 16 per stream
        # MJPEG viewers fill the socket buffers in seconds; SSE events are small and take minutes to
        took = server.wait(lambda: server.stream()["subscribers"] <= 8, 300)
        for sock in socks:
            sock.close()
        server.wait(lambda: server.stream()["subscribers"] == 0, 120)
        return (
            f"17th client: {over}; never-reading MJPEG viewers cut after {took:.0f} s",
            f"fds {fds} -> {server.fds()}",
        )

    rows.append(measured(server, "16 viewers (MJPEG+SSE) that never read", stalled_viewers))

    def cross_site() -> tuple[str, str]:
        evil = {"Origin": "http://evil.example"}
        form = server.client.post("/api/v1/detect", content=b"x", headers=evil).status_code
        host = server.client.get("/api/v1/streams", headers={"Host": "evil.example"}).status_code
        ws = server.client.get(
            "/api/v1/streams/main/ws",
            headers={**evil, "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                     "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="},
        ).status_code  # fmt: skip
        return f"cross-site POST {form}, WebSocket {ws}, Host evil.example {host}", "-"

    rows.append(measured(server, "cross-site form POST, WebSocket, DNS rebinding", cross_site))
    return rows


def stall_case(work: Path) -> tuple[Row, str]:
    address, camera, http = serve_stalling_camera(VTEST)
    config = work / "stall.yaml"
    config.write_text(
        f"streams:\n  - id: main\n    source: http://viewer:pw@{address}/cam.avi\n    stall_timeout_s: 2\n"
        f"    model: {SSD}\n"
    )
    server = Served(["--config", str(config)])
    try:
        server.wait(lambda: server.answers("/health/live") and server.stream()["frame_age_s"] is not None)

        def stall() -> tuple[str, str]:
            server.wait(lambda: "stalled" in (server.stream()["error"] or ""), 60)
            assert camera.went_silent_at is not None
            detected = time.monotonic() - camera.went_silent_at
            latest = server.client.get("/api/v1/streams/main/detections/latest").status_code
            ready = server.client.get("/health/ready").json()["status"]
            frames = server.frames()
            released = time.monotonic()
            camera.hold.set()
            server.wait(lambda: server.frames() > frames, 120)
            back = time.monotonic() - released
            return (
                f"stalled after {detected:.1f} s (limit 2 s); latest {latest}, ready {ready}",
                f"camera back -> first new detection {back:.2f} s",
            )

        row = measured(server, "camera keeps its socket open, sends nothing", stall)
        return row, server.stream()["last_error"] or ""
    finally:
        camera.hold.set()
        server.stop()
        http.shutdown()


def flapping_case(work: Path) -> Row:
    """A camera that sends a few seconds and goes silent, again and again: each reopen succeeds."""
    address, camera, http = serve_flapping_camera(VTEST)
    config = work / "flap.yaml"
    config.write_text(
        f"streams:\n  - id: main\n    source: http://{address}/cam.avi\n    mode: live\n    stall_timeout_s: 1\n"
        f"    model: {SSD}\n"
    )
    server = Served(["--config", str(config)])
    try:
        server.wait(lambda: server.answers("/health/live"))

        def flaps() -> tuple[str, str]:
            def unstable() -> bool:  # known to flap, and delivering between two stalls
                stream = server.client.get("/health/ready").json()["streams"]["main"]
                return bool(stream["unstable"]) and bool(stream["up"])

            took = server.wait(unstable, 180)
            body = server.client.get("/health/ready").json()
            return (
                f"ready {body['status']}: {body['streams']['main']['unstable']} ({camera.requests} opens)",
                f"seen flapping after {took:.0f} s",
            )

        return measured(server, "camera that flaps (600 KB, then silence; stall limit 1 s)", flaps)
    finally:
        camera.stop.set()
        server.stop()
        http.shutdown()


def broker_outage_case(work: Path) -> Row | None:
    """Mosquitto stopped for 15 s while people walk: time to reconnect once it is back, and duplicates delivered."""
    import shutil as which

    if which.which("mosquitto") is None and not Path("/usr/sbin/mosquitto").exists():
        return None
    import yaml

    from tests.mosquitto import Broker, Subscriber

    broker = Broker(work / "broker")
    broker.start()
    config = yaml.safe_load((Path(__file__).parent.parent / "deploy/events.example.yaml").read_text())
    config["streams"][0] |= {"source": str(VTEST), "loop": True}
    config["streams"][0]["events"]["end_after_s"] = 1
    config["mqtt"] |= {"device_id": "faults"}
    path = work / "events.yaml"
    path.write_text(yaml.safe_dump(config))
    subscriber = Subscriber(broker, ["edge-inference/faults/events"], client_id="faults-consumer")
    server = Served(["--config", str(path)], {"EDGE_MQTT_URL": broker.url, "EDGE_DATA_DIR": str(work / "data")})
    stream = config["streams"][0]["id"]

    def connected() -> bool:
        return bool(server.client.get("/api/v1/stats").json()["events"]["mqtt_connected"])

    try:
        server.wait(lambda: server.answers("/health/ready") and connected(), 180)

        def outage() -> tuple[str, str]:
            broker.stop()
            time.sleep(15)
            broker.start()
            back = server.wait(connected, 120)
            server.wait(lambda: server.client.get("/api/v1/stats").json()["events"]["outbox"]["mqtt"]["waiting"] == 0)
            changes = [m.json() for m in subscriber.received("/events")]
            keys = [(c["event"]["id"], c["type"], c["event"]["frames"]) for c in changes]
            return (
                f"reconnected {back:.1f} s after the broker came back (limit 5 s)",
                f"{len(keys) - len(set(keys))} duplicates in {len(keys)} messages",
            )

        return measured(server, f"MQTT broker down 15 s ({stream} walking)", outage)
    finally:
        server.stop()
        subscriber.close()
        broker.stop()


def events_server(work: Path, data: Path) -> Served:
    """The events example served with its data in `data` (no room kept free), once it has stored an event."""
    from tests.test_storage_faults import events_config

    server = Served(["--config", str(events_config(work, data, min_free_mb=0))])
    server.wait(lambda: server.answers("/health/ready"), 180)
    server.wait(lambda: server.client.get("/api/v1/stats").json()["events"]["recorded"] >= 1, 180)
    return server


def full_disk_case(work: Path) -> Row | None:
    """The data folder's disk (a 4 MB tmpfs) filled while people walk, then given room again."""
    from tests.mounts import fill, tmpfs_mounted

    data = work / "full"
    with tmpfs_mounted(data, 4096) as failed:
        if failed:
            print(f"  full disk: skipped, {failed}", file=sys.stderr)
            return None
        server = events_server(work, data)
        events = lambda: server.client.get("/api/v1/stats").json()["events"]  # noqa: E731
        try:

            def full() -> tuple[str, str]:
                filler = fill(data)
                server.wait(lambda: events()["lost"] >= 1, 180)
                health = server.client.get("/health/ready").json()
                lost = events()["lost"]
                filler.unlink()
                back = server.wait(lambda: server.client.get("/health/ready").json()["status"] == "ok", 180)
                said = server.log.count("events are not being stored")
                return (
                    f"ready {health['status']}: {health['problems'][0][:90]}...; {said} log line",
                    f"{lost} change(s) not stored, counted (live SSE/MQTT still got them); storing again "
                    f"{back:.1f} s after room was made",
                )

            return measured(server, "data folder's disk full (4 MB tmpfs)", full)
        finally:
            server.stop()


def damaged_database_case(work: Path) -> Row:
    """A page of events.db overwritten with garbage (header intact) before the service starts."""
    from tests.test_events import _event_change, _store
    from tests.test_storage_faults import damage, events_config

    data = work / "damaged"
    store = _store(data)
    for i in range(300):
        change = _event_change(event_id=f"old-{i:04d}-{'x' * 40}", start=1000.0 + i, zones=("door",))
        store.record(change.event, None, [("mqtt", "t/events", b"y" * 300, False)])
    store.close()
    damage(data / "events.db")
    t0 = time.monotonic()
    server = Served(["--config", str(events_config(work, data))])
    try:
        server.wait(lambda: server.answers("/health/ready"), 180)
        ready = time.monotonic() - t0
        notice = server.client.get("/api/v1/stats").json()["events"]["storage_notice"]
        kept = next(data.glob("events.db.damaged-*")).name
        return Row(
            "events.db with a damaged page",
            f"started (ready in {ready:.1f} s): {notice.split('): moved to')[0]}); moved aside, a fresh one opened",
            "-",
            f"{server.rss_mib():.0f}",
            f"the 300 old events kept in {kept}",
        )
    finally:
        server.stop()


def model_retry_case(work: Path) -> Row:
    mirror, cache = work / "mirror", work / "cache"
    (mirror / "onnx").mkdir(parents=True)
    env = {"EDGE_MODEL_MIRROR": str(mirror), "EDGE_MODEL_CACHE": str(cache)}
    server = Served(["--source", str(VTEST), "--loop", "--model", "yolox-nano"], env)
    try:
        server.wait(lambda: server.answers("/health/live") and server.stream()["state"] == "failed")

        def comes_back() -> tuple[str, str]:
            upload = server.client.post("/api/v1/detect", content=PHOTO.read_bytes()).status_code
            ready = server.client.get("/health/ready")
            shutil.copy(MODELS / "onnx" / "yolox_nano.onnx", mirror / "onnx" / "yolox_nano.onnx")
            took = server.wait(lambda: server.frames() > 0, 120)
            return f"/detect {upload}, ready {ready.status_code} ({ready.json()['status']}) while missing", (
                f"model back -> first detection {took:.1f} s (retries after 1, 2, 4 s...)"
            )

        return measured(server, "model missing at start (accelerator unplugged)", comes_back)
    finally:
        server.stop()


def sigterm_case() -> Row:
    from websockets.sync.client import connect

    server = Served(["--source", str(VTEST), "--loop", "--model", SSD])
    try:
        server.wait(lambda: server.answers("/health/ready"))
        rss = server.rss_mib()
        mjpeg = httpx.stream("GET", f"{server.base}/api/v1/streams/main/video.mjpg", timeout=60)
        next(mjpeg.__enter__().iter_bytes())
        sse = httpx.stream("GET", f"{server.base}/api/v1/streams/main/events", timeout=60)
        next(sse.__enter__().iter_bytes())
        with connect(f"ws://127.0.0.1:{server.port}/api/v1/streams/main/ws") as ws:
            ws.recv(timeout=60)
            t0 = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            code = server.process.wait(60)
            took = time.monotonic() - t0
        for response in (mjpeg, sse):
            response.__exit__(None, None, None)
    finally:
        server.stop()  # whatever happened above, no server is left running
    released = "cameras and accelerators released" in server.log
    return Row(
        "SIGTERM with MJPEG, SSE and WebSocket clients",
        f"exit ({code}) in {took:.2f} s",
        "-",
        f"{rss:.0f} -> exited",
        "devices released" if released else "NOT RELEASED",
    )


def token_case() -> Row:
    server = Served(["--source", str(VTEST), "--loop", "--model", SSD], token="faults-token")
    try:
        server.wait(lambda: server.answers("/health/ready"))
        with httpx.Client(base_url=server.base) as anonymous:
            without = anonymous.get("/api/v1/streams").status_code
            live = anonymous.get("/health/live").status_code
        with_token = server.client.get("/api/v1/streams").status_code
        return Row("API token set", f"no token {without}, Bearer {with_token}, /health/live {live}", "-", "-", "-")
    finally:
        server.stop()


def slow_unauthenticated_bodies_case() -> Row:
    """Ten unauthenticated clients trickling DeepStack forms (the image first, a byte then nothing of the 20 MB they
    declare), beside an authenticated upload and the liveness probe: the caller is known before any work is done."""
    photo = PHOTO.read_bytes()
    server = Served(["--source", str(VTEST), "--loop", "--model", SSD], token="faults-token-1234")
    try:
        server.wait(lambda: server.answers("/health/ready"))
        quiet = [post(server, photo, "image/jpeg") for _ in range(5)]
        head = (
            b'--b0undary\r\nContent-Disposition: form-data; name="image"; filename="x.jpg"\r\n'
            b"Content-Type: image/jpeg\r\n\r\n\xff"
        )
        socks = []
        for _ in range(10):
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.sendall(
                b"POST /v1/vision/detection HTTP/1.1\r\nHost: localhost\r\n"
                b"Content-Type: multipart/form-data; boundary=b0undary\r\nContent-Length: 20000000\r\n\r\n" + head
            )
            socks.append(sock)
        live: list[float] = []
        try:
            with httpx.Client(base_url=server.base, timeout=60) as probe:
                for _ in range(20):
                    t0 = time.perf_counter()
                    probe.get("/health/live")
                    live.append((time.perf_counter() - t0) * 1e3)
            busy = [post(server, photo, "image/jpeg") for _ in range(5)]
        finally:
            for sock in socks:
                sock.close()
        statuses = sorted({status for status, _ in busy})
        median = lambda answers: sorted(seconds for _, seconds in answers)[len(answers) // 2] * 1e3  # noqa: E731
        return Row(
            "10 unauthenticated DeepStack forms trickling (image first, 20 MB declared)",
            f"authenticated POST /detect {'/'.join(map(str, statuses))}, median {median(busy):.0f} ms "
            f"(alone: {median(quiet):.0f} ms); /health/live p95 {pct(live, 95):.1f} ms, max {max(live):.1f} ms",
            "-",
            f"{server.rss_mib():.0f}",
            "none held an upload slot",
        )
    finally:
        server.stop()


def token_guessing_case() -> Row:
    server = Served(["--source", str(VTEST), "--loop", "--model", SSD], token="faults-token-1234")
    try:
        server.wait(lambda: server.answers("/health/ready"))
        with httpx.Client(base_url=server.base, timeout=60) as guesser:
            t0 = time.monotonic()
            for attempt in range(40):
                guesser.get("/api/v1/streams", headers={"Authorization": f"Bearer guess-{attempt:05d}"})
            took = time.monotonic() - t0
        said = server.log.count("wrong tokens in the last minute")
        return Row(
            "40 wrong tokens on one connection",
            f"{40 / took:.1f} guesses a second (the first 10 at once, then one every 0.25 s); {said} log line",
            "-",
            f"{server.rss_mib():.0f}",
            "-",
        )
    finally:
        server.stop()


def stalled_disk_case(work: Path, seconds: float = 40.0) -> Row | None:
    """The data folder's file system frozen (`fsfreeze`, a loop-mounted ext4) while people walk, then thawed."""
    from tests.mounts import freezable

    data = work / "frozen"
    try:
        context = freezable(data)
        disk = context.__enter__()
    except (OSError, subprocess.CalledProcessError, pytest.skip.Exception) as exc:  # cannot be made here: said
        print(f"  stalled disk: skipped, {exc}", file=sys.stderr)
        return None
    server = events_server(work, data)
    events = lambda: server.client.get("/api/v1/stats").json()["events"]  # noqa: E731
    try:
        changes: list[dict] = []
        stop = threading.Event()

        def listen() -> None:
            with (
                httpx.Client(base_url=server.base, timeout=None) as client,
                client.stream("GET", "/api/v1/events/stream") as response,
            ):
                for line in response.iter_lines():
                    if stop.is_set():
                        return
                    if line.startswith("data:"):
                        changes.append({"at": time.monotonic()})

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        disk.freeze()
        frozen_at = time.monotonic()
        time.sleep(seconds)
        health = server.client.get("/health/ready").json()
        t0 = time.perf_counter()
        listed = server.client.get("/api/v1/events").status_code
        listed_ms = (time.perf_counter() - t0) * 1e3
        recorded = events()["recorded"]
        disk.thaw()
        thawed_at = time.monotonic()
        back = server.wait(lambda: events()["recorded"] > recorded, 180)
        stop.set()
        during = sum(frozen_at <= c["at"] <= thawed_at for c in changes)
        stalled = next((p for p in health["problems"] if "a write has been waiting" in p), "not said")
        return Row(
            f"data folder's disk frozen {seconds:.0f} s (fsfreeze on a loop-mounted ext4)",
            f"{during} event changes reached SSE while frozen; ready {health['status']}: {stalled[:70]}...; "
            f"GET /api/v1/events {listed} in {listed_ms:.0f} ms",
            "-",
            f"{server.rss_mib():.0f}",
            f"stored again {back:.1f} s after the thaw",
        )
    finally:
        disk.thaw()
        server.stop()
        context.__exit__(None, None, None)


def live_burst_case(clients: int = 200) -> Row:
    """A burst of dashboards: `clients` connections to `/api/v1/live` opened at once (the limits raised for it),
    the liveness probe timed throughout, the server's RSS at its peak."""
    from benchmarks.viewers import Readers

    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "burst.yaml"
        config.write_text(
            f"server:\n  max_connections: {clients + 50}\n  max_clients_per_stream: {clients + 10}\n"
            f"streams:\n  - id: main\n    source: {VTEST}\n    loop: true\n    model: {SSD}\n"
        )
        server = Served(["--config", str(config)])
        try:
            server.wait(lambda: server.answers("/health/ready"))
            rss_before = server.rss_mib()
            peak = rss_before
            probes: list[float] = []
            readers = Readers(server.port, "/api/v1/live", clients)
            try:
                with httpx.Client(base_url=server.base, timeout=60) as probe:
                    for _ in range(100):  # 10 s
                        t0 = time.perf_counter()
                        probe.get("/health/live")
                        probes.append((time.perf_counter() - t0) * 1e3)
                        peak = max(peak, server.rss_mib())
                        time.sleep(0.1)
            finally:
                readers.close()
            return Row(
                f"a burst of {clients} /api/v1/live clients (limits raised)",
                f"/health/live p95 {pct(probes, 95):.0f} ms, max {max(probes):.0f} ms; "
                f"{readers.received / 2**20:.0f} MiB sent in 10 s",
                "-",
                f"{rss_before:.0f} -> peak {peak:.0f}",
                "-",
            )
        finally:
            server.stop()


def _engine_death(how: str) -> Callable[[], Row]:
    def case() -> Row:
        from benchmarks.engine_faults import engine_death_case

        return engine_death_case(how)

    return case


def _hostile_server(how: str) -> Callable[[], Row]:
    def case() -> Row:
        from benchmarks.server_faults import server_fault_case

        return server_fault_case(how)

    return case


CASES = {
    "slow-bodies": slow_unauthenticated_bodies_case,
    "guessing": token_guessing_case,
    "live-burst": live_burst_case,
    "engine-abort": _engine_death("abort"),
    "engine-segfault": _engine_death("segfault"),
    "engine-hang": _engine_death("hang"),
    **{
        f"server-{how}": _hostile_server(how) for how in ("none", "flood", "flood-chunked", "trickle", "never", "reset")
    },
    **{f"server-{how}": _hostile_server(how) for how in ("wrong-shape", "nan", "error")},
}


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    doors = ("doors-httptools", "doors-h11")  # several rows each (door_faults.py)
    parser.add_argument("--only", nargs="+", choices=[*CASES, "stalled-disk", *doors], help="these cases alone")
    only = parser.parse_args().only
    rows: list[Row] = []
    if only:
        rows = [CASES[name]() for name in only if name in CASES]
        for name in (n for n in only if n in doors):
            from benchmarks.door_faults import door_cases

            rows += door_cases(name.removeprefix("doors-"))
        if "stalled-disk" in only:
            with tempfile.TemporaryDirectory() as folder:
                row = stalled_disk_case(Path(folder))
                rows += [row] if row else []
        _table(rows)
        return
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        server = Served(["--source", str(VTEST), "--loop", "--model", SSD])
        try:
            server.wait(lambda: server.answers("/health/ready"))
            server.wait(lambda: server.frames() > 10)
            rows += upload_cases(server)
            rows += connection_cases(server)
            frames = server.frames()
            server.wait(lambda: server.frames() > frames)  # the stream kept going through all of that
        finally:
            server.stop()
        stall_row, _ = stall_case(work)
        rows.append(stall_row)
        rows.append(flapping_case(work))
        rows.append(model_retry_case(work))
        full = full_disk_case(work)
        if full is not None:
            rows.append(full)
        rows.append(damaged_database_case(work))
        outage = broker_outage_case(work)
        if outage is not None:
            rows.append(outage)
    rows.append(sigterm_case())
    rows.append(token_case())
    rows += [case() for case in CASES.values()]
    with tempfile.TemporaryDirectory() as folder:
        stalled = stalled_disk_case(Path(folder))
        rows += [stalled] if stalled else []
    _table(rows)


def _table(rows: list[Row]) -> None:
    print(f"machine: {machine()}")
    print("| case | answer | /streams p95 ms during (max) | RSS MiB before -> after | lost / recovery |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row.case} | {row.answer} | {row.p95_ms} | {row.rss} | {row.lost} |")


if __name__ == "__main__":
    main()
