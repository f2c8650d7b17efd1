"""DeepStack's detection API, called by deepstack-python (the client Home Assistant's deepstack_object integration
uses; Blue Iris and Agent DVR send the same form) against a real server with a token."""

from __future__ import annotations

import socket
import time

import httpx
import pytest
from deepstack.core import DeepstackException, DeepstackObject, get_objects_summary

from tests.conftest import MEDIA, VTEST
from tests.inprocess import SSD_ONNX
from tests.server import running_server

pytestmark = pytest.mark.process

TOKEN = "deepstack-token-1234"
PHOTO = MEDIA / "kite_and_cold.jpg"


def _yard(tmp_path):
    """A config with one stream, `yard`, on the pedestrian video."""
    config = tmp_path / "streams.yaml"
    config.write_text(f"streams:\n  - id: yard\n    source: {VTEST}\n    model: {SSD_ONNX}\n    loop: true\n")
    return config


def test_a_deepstack_client_gets_the_detections_of_the_api_with_its_key_as_the_token(tmp_path):
    config = _yard(tmp_path)
    image = PHOTO.read_bytes()
    with running_server(["--config", str(config)], tmp_path / "serve.log", token=TOKEN) as server:
        server.wait_until("/health/ready", timeout=180)
        client = DeepstackObject(ip="127.0.0.1", port=server.port, api_key=TOKEN, min_confidence=0.5, timeout=120)
        predictions = client.detect(image)
        ours = server.client.post("/api/v1/detect", params={"conf": 0.5}, content=image, timeout=120).json()

        assert get_objects_summary(predictions).get("person", 0) >= 1  # the client's own reading of the answer
        assert len(predictions) == len(ours["detections"])
        for seen, detection in zip(predictions, ours["detections"], strict=True):
            assert seen["label"] == detection["label"] and seen["confidence"] >= 0.5
            assert seen["confidence"] == pytest.approx(detection["score"], abs=1e-4)
            corners = [seen["x_min"], seen["y_min"], seen["x_max"], seen["y_max"]]
            assert corners == pytest.approx(detection["box"], abs=0.5)  # whole pixels, as DeepStack gives them
            assert 0 <= seen["x_min"] < seen["x_max"] <= ours["width"] and seen["y_min"] < seen["y_max"]
        # a custom model by name: the stream of that name
        assert DeepstackObject(ip="127.0.0.1", port=server.port, api_key=TOKEN, custom_model="yard").detect(image)

        with pytest.raises(DeepstackException, match="status code: 401"):
            DeepstackObject(ip="127.0.0.1", port=server.port, api_key="wrong", timeout=60).detect(image)
        with pytest.raises(DeepstackException, match="Bad url"):  # the client's words for a 404
            DeepstackObject(ip="127.0.0.1", port=server.port, api_key=TOKEN, custom_model="ipcam-general").detect(image)
        refused = httpx.post(
            f"{server.base}/v1/vision/detection",
            files={"image": image},
            data={"api_key": TOKEN, "min_confidence": "45%"},
            timeout=60,
        )
        assert refused.status_code == 400 and refused.json()["success"] is False
        assert "min_confidence '45%' is not a fraction of 1" in refused.json()["error"]
        unknown = httpx.post(
            f"{server.base}/v1/vision/custom/ipcam-general", files={"image": image}, data={"api_key": TOKEN}
        )
        assert "custom/<name> names a stream (yard)" in unknown.json()["error"]
        listed = httpx.post(f"{server.base}/v1/vision/custom/list", data={"api_key": TOKEN})
        assert listed.json() == {"success": True, "models": ["yard"]}  # as Blue Iris asks CodeProject.AI for them
        assert httpx.post(f"{server.base}/v1/vision/custom/list", data={"api_key": "wrong"}).status_code == 401
        # the key is a token as good as the others: without it, nothing else on the service opens
        assert httpx.get(f"{server.base}/api/v1/streams").status_code == 401


def _slow_form(port: int, path: str, first: bytes, total: int) -> socket.socket:
    """A client that sends a form's header and its first bytes, then nothing more: `total` bytes declared."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: multipart/form-data; boundary=b0undary\r\n"
        f"Content-Length: {total}\r\n\r\n".encode()
        + first
    )
    return sock


def _answer(sock: socket.socket, timeout: float = 60) -> str:
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.decode("latin-1")


IMAGE_FIRST = (
    b'--b0undary\r\nContent-Disposition: form-data; name="image"; filename="x.jpg"\r\nContent-Type: image/jpeg\r\n\r\n'
)


def test_the_caller_is_known_before_any_work_is_done_for_a_deepstack_form(tmp_path):
    """The key came in the body and was looked at only once the whole body was read, inside the upload gate: ten
    unauthenticated sockets trickling bodies held every upload slot (an authenticated detect got 503), and
    `custom/list` wrote a 597 MB form to disk before its 401. Now the form's first bytes are read for the key, outside
    any shared slot, and the rest is never read for a caller who is not known."""
    config = _yard(tmp_path)
    image = PHOTO.read_bytes()
    with running_server(["--config", str(config)], tmp_path / "serve.log", token=TOKEN) as server:
        server.wait_until("/health/ready", timeout=180)
        # ten slow unauthenticated uploads: the image first, a byte and then nothing of the 20 MB they declare
        slow = [_slow_form(server.port, "/v1/vision/detection", IMAGE_FIRST + b"\xff", 20_000_000) for _ in range(10)]
        try:
            for _ in range(3):  # an authenticated upload still gets its answer, again and again
                answer = server.client.post("/api/v1/detect", content=image, timeout=120)
                assert answer.status_code == 200, answer.text
            # a form whose key is wrong is refused as soon as the key has come, the rest (50 MB) never read
            wrong = _slow_form(
                server.port,
                "/v1/vision/custom/list",
                b'--b0undary\r\nContent-Disposition: form-data; name="api_key"\r\n\r\nnot-the-token\r\n--b0undary\r\n',
                50_000_000,
            )
            head = _answer(wrong)
            assert head.startswith("HTTP/1.1 401"), head
            wrong.close()
            # a form that sends 20 KiB of image before any key: refused once the key can no longer be where it must
            keyless = _slow_form(server.port, "/v1/vision/custom/list", IMAGE_FIRST + b"\0" * 20_000, 50_000_000)
            head = _answer(keyless)
            assert head.startswith("HTTP/1.1 401"), head
            keyless.close()
        finally:
            for sock in slow:
                sock.close()
        # a client gone mid-body is a quiet line, not tracebacks (unauthenticated, it was a log flood)
        for path in ("/v1/vision/detection", "/api/v1/detect"):
            headers = {"Authorization": f"Bearer {TOKEN}"} if path.startswith("/api") else {}
            sock = _slow_form(server.port, path, IMAGE_FIRST + b"\xff\xd8", 1_000_000)
            if headers:
                sock.close()
                sock = socket.create_connection(("127.0.0.1", server.port))
                sock.sendall(
                    f"POST {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\n"
                    "Content-Type: image/jpeg\r\nContent-Length: 1000000\r\n\r\n".encode()
                    + b"\xff\xd8" * 100
                )
            time.sleep(0.5)
            sock.close()
        assert server.client.get("/health/live").status_code == 200
        time.sleep(1)
        log = server.log
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]


def test_token_guessing_is_slowed_and_said_once_per_client(tmp_path):
    """307 wrong tokens a second on one connection, and nothing logged. Past ten wrong tokens a minute, each further
    401 to that client waits; the log says so, once a minute per client. The right token is not held back."""
    config = _yard(tmp_path)
    with running_server(["--config", str(config)], tmp_path / "serve.log", token=TOKEN) as server:
        server.wait_until("/health/ready", timeout=180)
        with httpx.Client(base_url=server.base, timeout=60) as guesser:
            took = []
            for attempt in range(20):
                started = time.monotonic()
                answer = guesser.get("/api/v1/streams", headers={"Authorization": f"Bearer guess-{attempt:04d}"})
                took.append(time.monotonic() - started)
                assert answer.status_code == 401
        assert all(seconds >= 0.25 for seconds in took[10:]), took  # held back: never sooner, on any machine
        assert server.client.get("/api/v1/streams").status_code == 200  # the right token, from the same address
        log = server.log
    said = [line for line in log.splitlines() if "wrong tokens in the last minute" in line]
    assert len(said) == 1 and "client 127.0.0.1 sent 11 wrong tokens" in said[0], said
    assert "guess-" not in log  # what was guessed is not written down
