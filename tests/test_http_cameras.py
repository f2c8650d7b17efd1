"""Cameras over HTTP as cheap cameras and ESP32-CAMs serve them, from a real HTTP server on loopback: a snapshot URL
(each request answers one JPEG) polled at the stream's rate, an MJPEG stream, and the answers a camera gives to a
wrong password or a wrong path."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import cv2
import pytest

from edge_inference.edge.config import ServiceConfig
from tests.conftest import VTEST
from tests.helpers import run_edge
from tests.inprocess import SSD_ONNX, app_client

USER, PASSWORD = "admin", "p@ss word"  # in the URL as p%40ss%20word
CREDENTIALS = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


NONCE = "5f1e7c0a9b"


def _digest_ok(header: str, uri: str) -> bool:
    """RFC 7616 with MD5 and qop=auth, checked as a camera does."""
    if not header.startswith("Digest "):
        return False
    fields = dict(re.findall(r'(\w+)="?([^",]*)"?', header[7:]))

    def md5(text: str) -> str:
        return hashlib.md5(text.encode()).hexdigest()  # the protocol's own hash

    known = md5(f"{USER}:camera:{PASSWORD}")
    expected = md5(f"{known}:{NONCE}:{fields.get('nc')}:{fields.get('cnonce')}:auth:{md5(f'GET:{uri}')}")
    return fields.get("response") == expected and fields.get("username") == USER


def _frames(count: int) -> list[bytes]:
    capture, frames = cv2.VideoCapture(str(VTEST)), []
    for _ in range(count):
        frames.append(cv2.imencode(".jpg", capture.read()[1])[1].tobytes())
    capture.release()
    return frames


class Camera(BaseHTTPRequestHandler):
    """/capture: one JPEG a request (image/jpeg), /octet: the same called application/octet-stream, /stream: MJPEG,
    /page: an HTML page; basic authentication on every path, as such cameras ask for it."""

    frames: ClassVar[list[bytes]] = []  # set by the fixture on a subclass of its own
    asked: ClassVar[list[tuple[str, bool]]] = []  # (path, whether it carried the credentials)
    agents: ClassVar[list[tuple[str, str]]] = []  # (path, User-Agent)

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        given = self.headers.get("Authorization") or ""
        self.agents.append((path, self.headers.get("User-Agent", "")))
        if path == "/digest":  # as Hikvision and Dahua ask: digest, the password never sent
            self.asked.append((self.path, given.startswith("Basic")))  # the password in the clear: never
            if not _digest_ok(given, self.path):
                self._refuse(f'Digest realm="camera", qop="auth", nonce="{NONCE}", algorithm=MD5')
                return
            path = "/capture"
        else:
            self.asked.append((self.path, given == CREDENTIALS))
            if given != CREDENTIALS:
                self._refuse('Basic realm="camera"')
                return
        frame = self.frames[sum(p == path for p, _ in self.asked) % len(self.frames)]
        if path in ("/stream", "/video.mjpg", "/short"):
            self._stream(5 if path == "/short" else 2000)
            return
        kinds = {"/capture": "image/jpeg", "/octet": "application/octet-stream", "/page": "text/html"}
        body = b"<html>Login</html>" if path == "/page" else frame
        self.send_response(200 if path in kinds else 404)
        self.send_header("Content-Type", kinds.get(path, "text/plain"))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _refuse(self, challenge: str) -> None:
        self.send_response(401)
        self.send_header("WWW-Authenticate", challenge)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _stream(self, parts: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
        self.end_headers()
        try:
            for index in range(parts):
                frame = self.frames[index % len(self.frames)]
                self.wfile.write(b"--frame\r\nContent-Type: image/jpeg\r\n")
                self.wfile.write(f"Content-Length: {len(frame)}\r\n\r\n".encode() + frame + b"\r\n")
                time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture()
def camera() -> Iterator[tuple[str, type[Camera]]]:
    handler = type("ThisCamera", (Camera,), {"frames": _frames(10), "asked": [], "agents": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def _states(client, timeout: float = 120) -> dict[str, dict]:
    """Each stream's summary, once the good ones have processed a few frames and the bad ones have failed."""
    deadline = time.monotonic() + timeout
    while True:
        streams = {s["id"]: s for s in client.get("/api/v1/streams").json()}
        figures = client.get("/api/v1/stats").json()["streams"]
        good = all(figures[i]["frames_processed"] >= 3 for i in ("snap", "octet", "digest", "mjpeg", "named"))
        bad = all(streams[i]["error"] for i in ("wrong", "page", "missing"))
        if good and bad:
            return streams
        assert time.monotonic() < deadline, (streams, figures)
        time.sleep(0.1)


@pytest.mark.process
def test_a_snapshot_url_is_polled_and_an_mjpeg_camera_streams(camera):
    """A snapshot URL gave one frame, then "stopped delivering frames" and a reconnect: two log lines a frame and an
    "unstable" camera. Now each request is a frame, at the stream's fps, with the password sent once the camera
    has asked for it (one request a frame, not two); MJPEG still goes to FFmpeg."""
    address, handler = camera
    url = f"http://{USER}:p%40ss%20word@{address}"
    streams = [
        {"id": "snap", "source": f"{url}/capture", "fps": 5},
        {"id": "octet", "source": f"{url}/octet"},
        {"id": "digest", "source": f"{url}/digest"},
        {"id": "mjpeg", "source": f"{url}/stream"},
        {"id": "named", "source": f"{url}/video.mjpg"},  # named as a stream: FFmpeg's alone, no request to ask
        {"id": "wrong", "source": f"http://{USER}:guess@{address}/capture?wrong"},
        {"id": "page", "source": f"{url}/page"},
        {"id": "missing", "source": f"{url}/snap.jpg"},
    ]
    config = ServiceConfig.model_validate({"streams": [{"model": SSD_ONNX, "backend": "onnx", **s} for s in streams]})
    with app_client(config) as client:
        states = _states(client)
        figures = client.get("/api/v1/stats").json()["streams"]
        assert figures["snap"]["reconnects"] == 0 and figures["octet"]["reconnects"] == 0
        latest = client.get("/api/v1/streams/snap/detections/latest").json()
        assert any(d["label"] == "person" for d in latest["detections"])
        assert "refused the user and password (HTTP 401)" in states["wrong"]["error"]
        assert "has no such page (HTTP 404)" in states["missing"]["error"]
        assert "answers but sent no video" in states["page"]["error"]
        shown = str(states) + client.get("/api/v1/stats").text
        assert "guess" not in shown and "p%40ss" not in shown  # passwords masked
    snapshots = [given for path, given in handler.asked if path == "/capture"]
    assert snapshots[0] is False and all(snapshots[1:4])  # asked once, then sent with every request
    assert all(agent.startswith("Lavf") for path, agent in handler.agents if path == "/video.mjpg")  # FFmpeg's
    assert not any(in_clear for path, in_clear in handler.asked if path == "/digest")  # digest answered, never Basic


@pytest.mark.process
def test_edge_detect_takes_a_snapshot_url_and_runs_a_stream_url_frame_by_frame(camera):
    """As Ultralytics' `predict source=URL`: `edge detect http://...` was "no such file" (and the URL, its password
    included, was printed back). An image URL is one image; a stream runs every frame until it ends (or Ctrl-C)."""
    address, _ = camera
    url = f"http://{USER}:p%40ss%20word@{address}"
    model = ["-m", SSD_ONNX, "-b", "onnx", "--json"]
    snapshot = run_edge("detect", f"{url}/capture", *model)
    assert snapshot.returncode == 0, snapshot.stderr
    (record,) = [json.loads(line) for line in snapshot.stdout.splitlines()]
    assert record["source"] == f"http://{USER}:***@{address}/capture" and (record["width"], record["height"]) == (
        768,
        576,
    )
    assert any(d["label"] == "person" for d in record["detections"])
    stream = run_edge("detect", f"{url}/short", *model)
    frames = [json.loads(line) for line in stream.stdout.splitlines()]
    assert stream.returncode == 0 and [f["frame"] for f in frames] == list(range(5)), stream.stderr
    refused = run_edge("detect", f"http://{USER}:guess@{address}/capture", *model)
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert refused.returncode == 1 and len(errors) == 1 and "Traceback" not in refused.stderr
    assert "refused the user and password (HTTP 401)" in errors[0] and "guess" not in refused.stderr


@pytest.mark.parametrize("url", ["https://www.youtube.com/watch?v=LNwODJXcvt4", "https://youtu.be/LNwODJXcvt4"])
def test_a_youtube_address_is_answered_with_how_to_get_its_video(url):
    """Ultralytics' docs pass `source="https://youtu.be/..."`; here it was fetched as a snapshot and, on a machine
    online, read as a page that is not an image. Now one line before anything is fetched, for a stream and for
    `edge detect` alike."""
    from edge_inference.cli.detect import _snapshot
    from edge_inference.edge.stream.images import ImageError
    from edge_inference.edge.stream.sources import SourceError, open_source

    advice = "is a YouTube page, not a video stream: give the video's own address, which `yt-dlp -g"
    with pytest.raises(SourceError, match=re.escape(advice)):
        open_source(url)
    with pytest.raises(ImageError, match=re.escape(advice)):
        _snapshot(url)
