"""The service under trouble: slow model download, stalled clients, a stream that drops, a missing camera."""

from __future__ import annotations

import functools
import json
import socket
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pydantic import ValidationError

from edge_inference.edge.config import ConfigError, StreamConfig, load_config
from tests.conftest import MEDIA, MODELS, VTEST
from tests.helpers import run_edge
from tests.server import running_server


class _Handler(SimpleHTTPRequestHandler):
    """Serves files; `hold` delays model downloads, `cut_after` ends the first video responses early."""

    hold: threading.Event | None = None
    cut_after: int | None = None
    cuts_left = 0
    requests = 0

    def log_message(self, *args):  # keep test output clean
        pass

    def do_GET(self):
        type(self).requests += 1
        if self.hold is not None:
            self.hold.wait(60)
        if self.cut_after and type(self).cuts_left > 0 and self.path.endswith(".avi"):
            type(self).cuts_left -= 1
            data = (MEDIA / "vtest.avi").read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "video/x-msvideo")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: self.cut_after])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)  # the stream drops mid-file
            return
        super().do_GET()


@pytest.fixture()
def http_files():
    servers = []

    def serve(directory, **attrs):
        handler = type("Handler", (_Handler,), attrs)
        server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(directory)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"127.0.0.1:{server.server_address[1]}", handler

    yield serve
    for server in servers:
        server.shutdown()


@pytest.mark.process
def test_readiness_flips_from_503_to_200_once_the_model_is_loaded(tmp_path, http_files):
    release = threading.Event()
    address, _ = http_files(MODELS, hold=release)
    env = {"EDGE_MODEL_MIRROR": f"http://{address}/", "EDGE_MODEL_CACHE": str(tmp_path / "cache")}
    with running_server(["--source", str(VTEST), "--model", "yolox-nano"], tmp_path / "log", env) as server:
        not_ready = server.wait_until("/health/ready", status=503)
        assert not_ready.json()["status"] == "starting"
        assert not_ready.json()["streams"]["main"]["state"] == "loading"
        assert server.client.get("/health/live").status_code == 200
        assert server.client.get("/api/v1/streams").json()[0]["state"] == "loading"
        assert server.client.get("/health/ready").status_code == 503  # still downloading: the mirror holds it
        release.set()
        ready = server.wait_until("/health/ready", status=200)
        body = ready.json()
        assert body["status"] in ("ok", "degraded") and body["streams"]["main"]["error"] is None


@pytest.mark.process
def test_stalled_sse_clients_do_not_hold_up_a_reading_client(tmp_path):
    """Three clients that never read stay connected while a reading client gets a steady flow of events.

    That the pipeline never waits for a subscriber is proven deterministically at the publish layer
    (test_pipeline); here the same holds through real sockets, asserting progress, not a rate.
    """
    args = ["--source", str(VTEST), "--loop", "--no-pace", "--id", "fast"]
    with running_server(args, tmp_path / "log") as server:
        server.wait_until("/health/ready")
        stalled = []
        for _ in range(3):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a tiny window: the server's sends block soon
            sock.connect(("127.0.0.1", server.port))
            sock.sendall(b"GET /api/v1/streams/fast/events HTTP/1.1\r\nHost: localhost\r\n\r\n")  # never read
            stalled.append(sock)
        deadline = time.monotonic() + 60
        while server.client.get("/api/v1/streams").json()[0]["subscribers"] < 3:
            assert time.monotonic() < deadline, "the stalled clients never subscribed"
            time.sleep(0.1)
        frames = []
        with server.client.stream("GET", "/api/v1/streams/fast/events", timeout=60) as response:
            for line in response.iter_lines():
                if line.startswith("data:"):
                    frames.append(json.loads(line[5:])["frame"])
                if len(frames) >= 60:
                    break
        (stream,) = server.client.get("/api/v1/streams").json()
        for sock in stalled:
            sock.close()
    assert stream["subscribers"] == 3  # the reading client has gone; the stalled ones are still held
    assert frames == sorted(frames) and len(set(frames)) == 60  # in order, no repeats, still flowing


@pytest.mark.process
def test_a_stream_that_drops_is_reopened_and_its_password_never_shown(tmp_path, http_files):
    address, handler = http_files(MEDIA, cut_after=600_000, cuts_left=2)
    url = f"http://viewer:s3cr3tpw@{address}/vtest.avi"
    with running_server(["--source", url, "--id", "door"], tmp_path / "log") as server:
        server.wait_until("/health/ready")
        deadline = time.monotonic() + 60
        figures = {}
        while time.monotonic() < deadline:
            figures = server.client.get("/api/v1/stats").json()["streams"]["door"]
            if figures["reconnects"] >= 2 and figures["state"] == "running" and figures["frames_processed"] > 20:
                break
            time.sleep(0.2)
        assert figures["reconnects"] >= 2 and figures["state"] == "running", figures
        processed = figures["frames_processed"]
        server.wait_for_frames("door", processed + 10)  # frames flow again after the reopen
        (stream,) = server.client.get("/api/v1/streams").json()
        assert stream["source"] == f"http://viewer:***@{address}/vtest.avi"
        assert stream["mode"] == "live" and "stopped delivering" in stream["last_error"]
        responses = [server.client.get(p).text for p in ("/api/v1/streams", "/api/v1/stats", "/metrics")]
    assert handler.requests >= 3
    for text in [*responses, server.log]:
        assert "s3cr3tpw" not in text


@pytest.mark.process
def test_a_missing_camera_is_reported_while_other_streams_serve(tmp_path):
    config = tmp_path / "streams.yaml"
    config.write_text(
        f"streams:\n"
        f"  - id: porch\n    source: /dev/video9\n    model: yolox-nano\n"
        f"  - id: clip\n    source: {VTEST}\n    model: yolox-nano\n    loop: true\n"
    )
    with running_server(["--config", str(config)], tmp_path / "log") as server:
        server.wait_until("/health/ready")
        server.wait_for_frames("clip", 5)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            streams = {s["id"]: s for s in server.client.get("/api/v1/streams").json()}
            if streams["porch"]["last_error"]:
                break
            time.sleep(0.2)
        assert streams["porch"]["state"] == "reconnecting"
        assert "camera /dev/video9 cannot be opened" in streams["porch"]["last_error"]
        assert streams["clip"]["state"] == "running"
        assert server.client.get("/api/v1/streams/porch/detections/latest").status_code == 503


@pytest.mark.process
def test_bad_configs_and_sources_get_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("streams:\n  - id: a b\n    source: x.mp4\n")
    for args, fragment in [
        (["--config", str(bad)], "streams.0.id"),
        (["--config", str(tmp_path / "missing.yaml")], "no config at"),
        (["--source", str(tmp_path / "nothing.mp4")], "is not a camera, URL, or existing file"),
        (["--source", str(VTEST), "--model", "nope"], "no model named 'nope'"),
        # an address from another network (TEST-NET-1, never a machine's own): not "choose another port"
        (["--source", str(VTEST), "--host", "192.0.2.55"], "192.0.2.55 is not an address of this machine"),
        ([], "give --source"),
    ]:
        proc = run_edge("serve", *args, "--port", "0", timeout=60)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
        assert fragment in proc.stderr, proc.stderr


def test_two_zones_or_two_lines_of_one_name_are_refused():
    """A name keys /stats, the metrics and a Home Assistant entity: the second zone "door" hid the first."""
    square = [[0, 0], [1, 0], [1, 1], [0, 1]]
    stream = {"id": "a", "source": str(VTEST), "zones": [{"name": "door", "polygon": square}] * 2}
    with pytest.raises(ValidationError, match="door: used for two zones; give each zone a name of its own"):
        StreamConfig.model_validate(stream)
    line = {"name": "path", "start": [0, 0], "end": [1, 1]}
    with pytest.raises(ValidationError, match="path: used for two lines"):
        StreamConfig.model_validate({"id": "a", "source": str(VTEST), "lines": [line, line]})


@pytest.mark.process
def test_a_config_saved_in_another_encoding_is_read_or_refused_with_where_and_what_to_do(tmp_path):
    """Windows Notepad's "Unicode" (UTF-16) and its UTF-8 with a byte-order mark are read; a file saved as Latin-1
    with an accent, or with a control character pasted in, gets where and what to do (was a UnicodeDecodeError)."""
    text = f"streams:\n  - id: hall\n    source: {VTEST}  # caméra du hall\n"
    for encoding in ("utf-16", "utf-8-sig"):
        (tmp_path / "wide.yaml").write_bytes(text.encode(encoding))
        assert load_config(tmp_path / "wide.yaml").streams[0].source == str(VTEST)
    column = text.splitlines()[2].index("é") + 1
    (tmp_path / "latin.yaml").write_bytes(text.encode("latin-1"))
    (tmp_path / "pasted.yaml").write_text(text.replace("hall", "hall\x01"))
    for name, fragment in [
        ("latin.yaml", f"latin.yaml is not UTF-8 text (byte 0xe9 at line 3, column {column}): save it as UTF-8"),
        ("pasted.yaml", "pasted.yaml has a control character (0x01) at line 2, column 13, which YAML does not allow"),
    ]:
        proc = run_edge("serve", "--config", str(tmp_path / name), "--port", "0", timeout=60)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
        assert fragment in proc.stderr, proc.stderr


@pytest.mark.process
def test_a_key_the_config_does_not_know_is_answered_with_the_keys_of_its_section(tmp_path):
    # Frigate's `threshold` on a stream and a typo in motion's: each answered with what that section takes
    typo = tmp_path / "typo.yaml"
    typo.write_text(f"streams:\n  - id: a\n    source: {VTEST}\n    threshold: 0.4\n    motion: {{treshold: 0.1}}\n")
    proc = run_edge("serve", "--config", str(typo), "--port", "0", timeout=60)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "streams.0.threshold: not a setting (did you mean conf?); streams.0 takes: id, source, model" in errors[0]
    assert ", conf, " in errors[0]
    assert (
        "streams.0.motion.treshold: not a setting (did you mean threshold?); streams.0.motion takes: threshold, "
        "pixel_threshold"
    ) in errors[0]


NO_STREAMS = "streams: no streams: give at least one, e.g. streams: [{id: porch, source: 0}]"


def test_a_config_written_as_users_write_it_is_read_or_answered_with_what_to_write(tmp_path):
    """`source: 0` (YAML's number: the README's camera index), streams keyed by id as Frigate's `cameras:` are, and
    the slips of a first config: a percentage for a fraction, a space in a name, another program's key."""
    config = tmp_path / "streams.yaml"
    config.write_text(f"streams:\n  porch:\n    source: 0\n  sample:\n    source: {VTEST}\n    loop: true\n")
    loaded = load_config(config)
    assert [(s.id, s.source) for s in loaded.streams] == [("porch", "0"), ("sample", str(VTEST))]
    # cameras numbered as a house numbers them: YAML's numbers 1 and 2 (pydantic: "Input should be a valid string")
    config.write_text("streams:\n  - {id: 1, source: 0}\n  - {id: 2, source: 1}\n")
    assert [s.id for s in load_config(config).streams] == ["1", "2"]
    for text, answer in [
        (
            "streams:\n  porch:\n    source: 0\n  gate:\n    source: rtsp://127.0.0.1/x\n    conf: 35\n",
            "streams.gate.conf: 35 is more than 1: it is a fraction of 1, so 35% is 0.35",
        ),
        (
            "streams:\n  - id: front door\n    source: 0\n",
            "streams.0.id: 'front door' is not a name: use 1 to 64 letters, digits, '-' and '_' (names go into URLs, "
            "MQTT topics and metrics), e.g. front_door",
        ),
        ("streams:\n  - id: Café\n    source: 0\n", "e.g. Cafe"),  # the letter without its accent, not Caf
        (
            "cameras:\n  porch:\n    source: 0\n",
            "cameras: not a setting (did you mean streams?); the top level takes: server, detectors, streams,",
        ),
        (
            "streams:\n  porch:\n    id: gate\n    source: 0\n",
            "streams: porch has id: gate; leave id out where the key names the stream",
        ),
        (
            "streams:\n  - id: a\n    url: rtsp://127.0.0.1/x\n",
            "streams.0.url: not a setting (did you mean source?); streams.0 takes: id, source,",
        ),
        # pydantic's "List should have at least 1 item after validation, not 0", "Input should be a valid list",
        # "Field required": nothing said what a stream is written as
        *[(text, NO_STREAMS) for text in ("streams: []\n", "streams:\n", "server: {port: 8080}\n")],
        (
            "streams:\n  - source: 0\n",
            "streams.0.id: missing: each stream needs an id (letters, digits, '-', '_'), its name in URLs and topics: "
            "id: porch",
        ),
    ]:
        config.write_text(text)
        with pytest.raises(ConfigError) as caught:
            load_config(config)
        assert answer in str(caught.value), caught.value


@pytest.mark.process
def test_a_number_written_as_people_write_it_is_answered_with_the_number_to_write(tmp_path):
    """`conf: 50%`, `iou: 0,45` (a decimal comma, as a German or French user writes it), `recheck_s: 30s`,
    `max_snapshot_mb: 1GB`, `fps: 5 fps`: YAML reads each as text, and each was "Input should be a valid number,
    unable to parse string as a number". The answer now is the number to write, in the setting's own unit; the
    command line's `--conf 0,5` and `--conf 50` get the same answers, in `edge detect` and `edge serve`."""
    config = tmp_path / "streams.yaml"
    config.write_text(
        "storage: {max_snapshot_mb: 1GB, max_age_days: 2 weeks}\n"
        "streams:\n  porch:\n    source: 0\n    conf: 50%\n    iou: '0,45'\n    fps: 5 fps\n"
        "    motion: {recheck_s: 500ms}\n    threads: two\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    said = str(caught.value)
    for answer in (
        "streams.porch.conf: '50%' is a percentage: write the fraction of 1, 0.5",
        "streams.porch.iou: '0,45' has a decimal comma: write 0.45",
        "streams.porch.fps: '5 fps' has its unit written, which the setting's name gives: write 5",
        "streams.porch.motion.recheck_s: '500ms' has its unit written: recheck_s is in seconds, so write 0.5",
        "storage.max_snapshot_mb: '1GB' has its unit written: max_snapshot_mb is in MiB, so write 1024",
        "storage.max_age_days: '2 weeks' has its unit written: max_age_days is in days, so write 14",
        "streams.porch.threads: Input should be a valid integer",  # not a number at all: pydantic's words
    ):
        assert answer in said, said
    for typed, answer in [
        ("0,5", "'0,5' has a decimal comma: write 0.5"),
        ("50", "50 is more than 1: it is a fraction of 1, so 50% is 0.5"),
    ]:
        for command in (["detect", str(MEDIA / "cat_720p.jpg")], ["serve", "--source", str(VTEST), "--check"]):
            proc = run_edge(*command, "--conf", typed)
            assert proc.returncode == 2 and f"Invalid value for '--conf': {answer}" in proc.stderr, proc.stderr


def test_a_stream_written_as_the_command_line_reads_it_is_taken(tmp_path):
    """`motion: true` (as `--motion` reads), `tracking: true`, `classes: person, car` (as `--classes person,car`
    takes it), `threads: auto` (the default's name) were refused in pydantic's words ("Input should be a valid
    dictionary or instance of MotionConfig", "classes.list[union[str,int]]: Input should be a valid list; ...").
    Each is now read as meant; `backend: [onnx, tflite]` is answered with `compare:`, which runs several."""
    config = tmp_path / "streams.yaml"
    config.write_text(
        f"streams:\n  - id: door\n    source: {VTEST}\n    motion: true\n    tracking: true\n"
        "    events: true\n    classes: person, car, 2\n    threads: auto\n"
        f"  - id: yard\n    source: {VTEST}\n    motion: false\n"
    )
    door, yard = load_config(config).streams
    assert door.motion == StreamConfig(id="x", source="0", motion={}).motion and door.motion is not None
    assert door.tracking is not None and door.events is not None and door.tracking.labels == ["person"]
    assert door.classes == ["person", "car", 2] and door.threads is None
    assert yard.motion is None
    config.write_text(f"streams:\n  - id: door\n    source: {VTEST}\n    backend: [onnx, tflite]\n")
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert "streams.0.backend: one backend a stream; to run the frames through several side by side, write " in str(
        caught.value
    )
    assert "compare: [onnx, tflite]" in str(caught.value)


def test_zones_pasted_from_a_frigate_config_are_read(tmp_path):
    """Frigate keys zones by name and writes `coordinates: 0.1,0.2,0.5,0.2,...` (or a list of "x,y"): pasted here,
    that was "zones: Input should be a valid list". Both forms are now this config's zones; Frigate's `objects` on a
    zone is answered with where the labels are set here, at the zone's name (it was `zones.1`, the zone's place in
    a list the file does not have), and an odd count of numbers with "x,y pairs"."""
    config = tmp_path / "streams.yaml"
    frigate = (
        f"streams:\n  door:\n    source: {VTEST}\n    tracking: true\n    zones:\n"
        "      driveway:\n        coordinates: 0.1,0.2,0.5,0.2,0.5,0.9,0.1,0.9\n"
        "      porch:\n        coordinates:\n          - 545,1077\n          - 747,939\n          - 788,805\n"
    )
    config.write_text(frigate)
    (stream,) = load_config(config).streams
    assert [(zone.name, zone.polygon) for zone in stream.zones] == [
        ("driveway", [(0.1, 0.2), (0.5, 0.2), (0.5, 0.9), (0.1, 0.9)]),
        ("porch", [(545, 1077), (747, 939), (788, 805)]),
    ]
    for text, answer in [
        (
            frigate.replace("      porch:\n", "      porch:\n        objects: [person]\n"),
            "streams.door.zones.porch.objects: not a setting: the labels a zone counts are the stream's",
        ),
        (frigate.replace("0.1,0.2,0.5,0.2,0.5,0.9,0.1,0.9", "1,2,3"), "3 numbers: coordinates come in x,y pairs"),
    ]:
        config.write_text(text)
        with pytest.raises(ConfigError) as caught:
            load_config(config)
        assert answer in str(caught.value), caught.value


def test_a_camera_pasted_from_a_frigate_config_is_a_stream(tmp_path):
    """A Frigate camera block (`ffmpeg.inputs` with roles, `hwaccel_args`, `detect: {width, height, fps}`,
    `objects: {track, filters}`) was refused five times over ("streams.front.source: Field required",
    "ffmpeg.inputs: not a setting", "hwaccel_args: not a setting", ...), though the presets are Frigate's own names.
    It is now the stream it describes; what has no place here is named in one line."""
    from edge_inference.edge.stream.ffmpeg import PRESETS

    config = tmp_path / "streams.yaml"
    frigate = (
        "streams:\n  front:\n    ffmpeg:\n      hwaccel_args: preset-rpi-64-h264\n      inputs:\n"
        "        - path: rtsp://127.0.0.1:8554/record\n          roles: [record]\n"
        "        - path: rtsp://127.0.0.1:8554/sub\n          input_args: preset-rtsp-udp\n          roles: [detect]\n"
        "    detect: {enabled: true, width: 640, height: 360, fps: 5}\n"
        "    objects:\n      track: [person, car]\n      filters: {car: {min_score: 0.7}}\n"
    )
    config.write_text(frigate)
    (front,) = load_config(config).streams
    assert (front.id, front.source, front.width, front.height, front.fps) == (
        "front",
        "rtsp://127.0.0.1:8554/sub",
        640,
        360,
        5,
    )
    assert front.ffmpeg is not None and front.ffmpeg.hwaccel in PRESETS
    assert front.ffmpeg.input_args == "preset-rtsp-udp"
    assert front.classes == {"person": 0.5, "car": 0.7}  # Frigate's default min_score for a label without a filter
    config.write_text(frigate.replace("{car: {min_score: 0.7}}", "{car: {min_score: 0.7}, dog: {min_score: 0.4}}"))
    assert load_config(config).streams[0].classes == {"person": 0.5, "car": 0.7}  # dog is not tracked: not reported
    config.write_text(frigate)
    config.write_text(
        frigate.replace("fps: 5}", "fps: 5, stationary: {interval: 50}}").replace("0.7}", "0.7, min_area: 9}")
    )
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert "streams.front: detect.stationary, objects.filters.car.min_area: Frigate's, with no place here" in str(
        caught.value
    )
