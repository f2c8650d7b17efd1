"""The first hour in a terminal: each message a new user met, asserted as that user gets it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from edge_inference.cli.serve import with_environment
from edge_inference.edge.config import ConfigError, ServerConfig, ServiceConfig, load_config, single_stream_config
from edge_inference.edge.config.env import EnvironmentReferenceError, filled_from_environment
from edge_inference.edge.settings import Settings
from edge_inference.edge.stream.ffmpeg import ffmpeg_source
from edge_inference.edge.stream.sources import open_source
from edge_inference.edge.tools.bench import Pair, PairResult
from edge_inference.edge.tools.bench_report import plot_label
from tests.conftest import MEDIA, REPO, VTEST
from tests.helpers import run_edge
from tests.inprocess import SSD_ONNX, app_client, service_config
from tests.server import running_server

CAT = str(MEDIA / "cat_720p.jpg")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def errors_of(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in proc.stderr, proc.stderr
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


@pytest.mark.process
def test_a_download_that_fails_names_a_way_that_exists_and_leaves_nothing_behind(tmp_path):
    cache = tmp_path / "cache"
    mirror = f"http://127.0.0.1:{free_port()}/"  # nothing listens: refused at once, as a machine offline is
    proc = run_edge("detect", CAT, "-m", "nanodet-m", "-b", "onnx", env={"EDGE_MODEL_MIRROR": mirror,
                    "EDGE_MODEL_CACHE": str(cache)})  # fmt: skip
    (line,) = errors_of(proc)
    assert proc.returncode == 1 and line.startswith("error: cannot download")
    assert "(or --mirror)" not in line  # `edge detect` has no such flag
    assert "set EDGE_MODEL_MIRROR" in line and "edge models pull NAME --mirror FOLDER" in line
    assert "--mirror" in run_edge("models", "pull", "--help").stdout  # the way it names is there
    assert not [p for p in cache.rglob("*") if p.is_file()]  # no empty lock file or partial download stays


@pytest.mark.process
def test_the_401_answer_says_where_the_token_comes_from():
    with app_client(service_config({"token": "s3cret-token-for-tests"})) as client:
        detail = client.get("/api/v1/streams").json()["detail"]
    assert "the URL edge serve printed" not in detail  # it prints no token when the user gave one
    for place in ("Authorization: Bearer", "?token=", "server.token", "EDGE_TOKEN", "EDGE_TOKEN_FILE"):
        assert place in detail


@pytest.mark.process
def test_bad_yaml_says_the_line_and_column(tmp_path):
    config = tmp_path / "streams.yaml"
    config.write_text("streams:\n  - id: a\n    source: 0\n  - id: b\n   source: 1\n")  # 'source' one space short
    (line,) = errors_of(run_edge("serve", "--config", str(config)))
    assert "not valid YAML at line 5, column 4:" in line
    assert "while parsing a block collection that starts at line 2" in line
    # the two mistakes users make most, in words that say what to change (PyYAML: "found character '\t' that
    # cannot start any token", "mapping values are not allowed here")
    config.write_text("streams:\n  - id: a\n    source: 0\n    conf:\t0.5\n")
    (line,) = errors_of(run_edge("serve", "--config", str(config)))
    assert line.endswith(
        "at line 4, column 10: a tab, and YAML indents and separates with spaces only: replace it with spaces"
    )
    config.write_text("streams:\n  - id: a\n     source: 0\n")
    (line,) = errors_of(run_edge("serve", "--config", str(config)))
    assert "at line 3, column 12: mapping values are not allowed here (usually a line indented deeper" in line


@pytest.mark.process
def test_a_key_given_twice_is_refused_where_it_is_and_anchors_have_a_place(tmp_path):
    """A second `streams:` pasted below the first (a camera added from a forum post) replaced the first without a
    word: every camera above it was gone. PyYAML takes the last of two keys; the loader now refuses the second with
    both lines. Keys merged with `<<: *anchor` may still be given again, and `x-` keys hold the anchors."""
    config = tmp_path / "streams.yaml"
    config.write_text(
        f"streams:\n  - {{id: porch, source: {VTEST}}}\nserver: {{port: 8080}}\nstreams:\n  - {{id: yard, source: 0}}\n"
    )
    (line,) = errors_of(run_edge("serve", "--config", str(config)))
    assert line == (
        f"error: config {config} is not valid YAML at line 4, column 1: streams is given twice in one mapping (first "
        "at line 1), and the second would replace the first: keep one (another stream is one more item in the same "
        "streams: list)"
    )
    config.write_text(f"streams:\n  - id: porch\n    source: {VTEST}\n    conf: 0.3\n    conf: 0.6\n")
    (line,) = errors_of(run_edge("serve", "--config", str(config)))
    assert "at line 5, column 5: conf is given twice in one mapping (first at line 4)" in line
    config.write_text(
        "x-camera: &camera {model: ssd-mobilenet-v2, conf: 0.4, backend: onnx}\n"
        f"streams:\n  - {{<<: *camera, id: porch, source: {VTEST}, conf: 0.6}}\n"
        "  - {<<: *camera, id: yard, source: 0}\n"
    )
    loaded = load_config(config)
    assert [(s.id, s.model, s.backend, s.conf) for s in loaded.streams] == [
        ("porch", "ssd-mobilenet-v2", "onnx", 0.6),
        ("yard", "ssd-mobilenet-v2", "onnx", 0.4),
    ]
    config.write_text(f"defaults: {{conf: 0.4}}\nstreams:\n  - {{id: porch, source: {VTEST}}}\n")
    (line,) = errors_of(run_edge("serve", "--config", str(config)))
    assert line.endswith("keys starting with x- are yours (for YAML anchors)") and "defaults: not a setting" in line


@pytest.mark.process
def test_a_short_token_is_counted_in_characters(tmp_path):
    config = tmp_path / "streams.yaml"
    config.write_text(f"server:\n  token: abcde\nstreams:\n  - id: a\n    source: {CAT}\n")
    (line,) = errors_of(run_edge("serve", "--config", str(config)))
    assert "server.token: the token must be at least 8 characters long (this one has 5)" in line
    assert "items" not in line and "Value error" not in line and "abcde" not in line


def test_the_address_from_the_environment_yields_to_the_config_file_and_the_flags():
    env = Settings(host="127.0.0.2", port=9001)
    stream = {"id": "a", "source": CAT}
    plain = with_environment(single_stream_config(stream, {}), env)
    assert (plain.server.host, plain.server.port) == ("127.0.0.2", 9001)
    flagged = with_environment(single_stream_config(stream, {"port": 9002}), env, flags=["port"])
    assert (flagged.server.host, flagged.server.port) == ("127.0.0.2", 9002)
    from_file = ServiceConfig.model_validate({"server": {"port": 9003}, "streams": [stream]})
    assert with_environment(from_file, env).server.port == 9003
    assert with_environment(from_file, Settings()).server.host == "127.0.0.1"  # nothing set: the defaults


@pytest.mark.process
def test_edge_serve_takes_its_config_and_port_from_the_environment(tmp_path):
    """The README's container and systemd case: no flags, EDGE_CONFIG and EDGE_PORT set."""
    config, port = tmp_path / "streams.yaml", free_port()
    config.write_text(f"streams:\n  - id: envcam\n    source: {CAT}\n    model: {SSD_ONNX}\n    backend: onnx\n")
    env = {**os.environ, "EDGE_CONFIG": str(config), "EDGE_PORT": str(port)}
    process = subprocess.Popen(
        [sys.executable, "-m", "edge_inference", "serve"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline, answer = time.monotonic() + 120, None
        while answer is None and process.poll() is None and time.monotonic() < deadline:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/streams", timeout=5)
            except httpx.TransportError:
                time.sleep(0.2)
        assert answer is not None, f"edge serve did not answer on EDGE_PORT {port}"
        assert [s["id"] for s in answer.json()] == ["envcam"]
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.communicate(timeout=30)
    (line,) = errors_of(run_edge("serve", env={"EDGE_PORT": "eighty"}))
    assert line.startswith("error: an EDGE_* environment variable is invalid: EDGE_PORT:")


@pytest.mark.process
def test_a_config_reads_its_secrets_from_the_environment_as_compose_writes_them(tmp_path):
    """`rtsp://admin:${CAM_PASSWORD}@...` went to the camera as written, a refused login with no word of why, so a
    camera's password had to sit in a file that gets shared and committed. Now `${NAME}` is read from edge's
    environment (systemd's EnvironmentFile=, Compose's environment:); one that is not set stops the start in a line
    naming it, its place and where to set it; a password with a bare `$` is left as it is written."""
    config = tmp_path / "streams.yaml"
    config.write_text(
        "server: {token: '${DOOR_TOKEN}', port: '${DOOR_PORT:-8080}'}\n"
        "streams:\n"
        "  door: {source: '${CLIPS}/vtest.avi', model: '${MODELS_DIR}/door.onnx', backend: onnx, loop: true}\n"
    )
    (tmp_path / "models").mkdir()
    (tmp_path / "models/door.onnx").symlink_to(SSD_ONNX)
    (line,) = errors_of(run_edge("serve", "--config", str(config), env={"CLIPS": str(VTEST.parent)}))
    assert line == (
        f"error: config {config}: server.token: ${{DOOR_TOKEN}} is not set in edge's environment; set it where edge "
        "starts (a systemd unit's Environment= or EnvironmentFile=, `docker run -e`, Compose's environment:), or give "
        "a default: ${DOOR_TOKEN:-value}"
    )
    env = {"CLIPS": str(VTEST.parent), "MODELS_DIR": "models", "DOOR_TOKEN": "from-the-environment"}
    with running_server(["--config", str(config)], tmp_path / "log", env=env) as server:
        server.client.headers["Authorization"] = "Bearer from-the-environment"
        server.wait_until("/health/ready", timeout=120)
        server.wait_for_frames("door", 1)  # the clip and the model, found through the variables
        latest = server.client.get("/api/v1/streams/door/detections/latest").json()
        assert any(d["label"] == "person" for d in latest["detections"])
        assert httpx.get(server.base + "/api/v1/streams", timeout=10).status_code == 401  # the token is in force
    forms = {
        "plain": "${SET}",
        "unset_default": "${UNSET:-7}",
        "empty_default": "${EMPTY:-7}",
        "empty_kept": "${EMPTY-7}",
        "passwords": ["pa$$word", "pa$word", "$${NOT_READ}"],
    }
    filled = filled_from_environment(forms, {"SET": "s3cr$t", "EMPTY": ""})
    assert filled == {
        "plain": "s3cr$t",
        "unset_default": "7",
        "empty_default": "7",
        "empty_kept": "",
        "passwords": ["pa$$word", "pa$word", "${NOT_READ}"],
    }
    for value, message in [
        ({"mqtt": {"password": "${BROKER_PW:?the broker's password}"}}, "mqtt.password: ${BROKER_PW} is not set: the"),
        ({"streams": [{"source": "rtsp://${CAM USER}@cam/"}]}, "streams.0.source: ${CAM USER} is not an environment"),
    ]:
        with pytest.raises(EnvironmentReferenceError, match=re.escape(message)):
            filled_from_environment(value, {})


def test_a_stream_reports_only_the_classes_it_names_each_from_its_own_score(tmp_path):
    """Frigate's `objects: track:` and Ultralytics' `classes` had no counterpart: every class came to the API, SSE
    and MQTT. `classes:` names them, as a list or with each one's least score; a name the model lacks is in health."""
    streams = [
        {"id": "hall", "classes": {"Person": 0.6}},
        {"id": "yard", "classes": ["persn"]},
    ]
    config = ServiceConfig.model_validate(
        {"streams": [{"model": SSD_ONNX, "source": str(VTEST), "loop": True, **s} for s in streams]}
    )
    with app_client(config) as client:
        deadline, seen = time.monotonic() + 180, []
        while len(seen) < 20:  # detections from several frames
            assert time.monotonic() < deadline, client.get("/health/ready").json()
            latest = client.get("/api/v1/streams/hall/detections/latest")
            seen += latest.json()["detections"] if latest.status_code == 200 else []
            time.sleep(0.05)
        assert {d["label"] for d in seen} == {"person"} and min(d["score"] for d in seen) >= 0.6
        health = client.get("/health/ready").json()
        assert any(
            p.startswith("stream yard: classes names 'persn' (did you mean 'person'?)") for p in health["problems"]
        )
    for setting, message in [
        ("objects: [person]", "streams.porch.objects: not a setting (did you mean classes?)"),
        ("imgsz: 320", "streams.porch.imgsz: not a setting: the model's input size is its file's own"),
    ]:
        (tmp_path / "streams.yaml").write_text(f"streams:\n  porch:\n    source: 0\n    {setting}\n")
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(tmp_path / "streams.yaml")


@pytest.mark.process
def test_relative_paths_in_a_config_are_read_from_its_folder_wherever_edge_starts(tmp_path, monkeypatch):
    """A config in ~/cams naming models/door.onnx and clips/door.avi was read from the folder edge started in: it
    worked from ~/cams and nowhere else (a systemd unit starts in /var/lib/edge), and the error named the path as
    written. Now its paths are read from its own folder; one that is only in the working folder is still found."""
    cams, elsewhere = tmp_path / "cams", tmp_path / "elsewhere"
    for folder in (cams / "models", cams / "clips", cams / "photos", elsewhere / "old"):
        folder.mkdir(parents=True)
    (cams / "models/door.onnx").symlink_to(SSD_ONNX)
    (cams / "clips/door.avi").symlink_to(VTEST)
    (cams / "photos/cat.jpg").symlink_to(CAT)
    (cams / "token").write_text("a-token-of-the-user\n")
    (cams / "ca.pem").write_text("")
    (elsewhere / "old/yard.avi").symlink_to(VTEST)  # how a config was read before: from the working folder
    config = cams / "streams.yaml"
    config.write_text(
        "server: {token_file: token}\nstorage: {data_dir: data}\nmqtt: {url: 'mqtt://127.0.0.1:1', ca_file: ca.pem}\n"
        "streams:\n"
        "  - {id: door, source: clips/door.avi, model: models/door.onnx, backend: onnx}\n"
        "  - {id: yard, source: old/yard.avi, model: yolox-nano}\n"
        "  - {id: photos, source: 'photos/*.jpg', model: models/door.onnx}\n"
        "  - {id: cam, source: '0', model: ssd-mobilenet-v2}\n"
        "  - {id: gate, source: 'rtsp://127.0.0.1:1/x', model: yolox-nan}\n"
        "  - {id: gone, source: clips/gone.avi, model: models/gone.onnx}\n"
    )
    monkeypatch.chdir(elsewhere)
    loaded = load_config(Path("../cams/streams.yaml"))
    sources = {s.id: s.source for s in loaded.streams}
    models = {s.id: s.model for s in loaded.streams}
    assert Path(sources["door"]) == cams / "clips/door.avi" and Path(models["door"]) == cams / "models/door.onnx"
    assert sources["yard"] == "old/yard.avi" and models["yard"] == "yolox-nano"  # the working folder's; a registry name
    assert Path(sources["photos"]) == cams / "photos/*.jpg"
    assert (sources["cam"], sources["gate"], models["gate"]) == ("0", "rtsp://127.0.0.1:1/x", "yolox-nan")
    # in neither folder: the config's, so the error names the whole path where it looked
    assert Path(sources["gone"]) == cams / "clips/gone.avi" and Path(models["gone"]) == cams / "models/gone.onnx"
    assert loaded.server.token_file == cams / "token" and loaded.storage.data_dir == cams / "data"
    assert loaded.mqtt is not None and loaded.mqtt.ca_file == cams / "ca.pem"

    config.write_text(
        "server: {token_file: token}\nstorage: {data_dir: data}\n"
        "streams:\n  - {id: door, source: clips/door.avi, model: models/door.onnx, backend: onnx, loop: true}\n"
    )
    with app_client(
        load_config(Path("../cams/streams.yaml")), {"Authorization": "Bearer a-token-of-the-user"}
    ) as client:
        deadline, latest = time.monotonic() + 120, client.get("/api/v1/streams/door/detections/latest")
        while latest.status_code == 503 and time.monotonic() < deadline:  # the model still loading
            time.sleep(0.1)
            latest = client.get("/api/v1/streams/door/detections/latest")
        assert latest.status_code == 200 and (latest.json()["width"], latest.json()["height"]) == (768, 576)
        assert client.get("/api/v1/streams").json()[0]["source"] == str(cams / "clips/door.avi")
    (line,) = errors_of(_serve_missing(cams, elsewhere))
    assert line == f"error: source {cams / 'clips/gone.avi'} is not a camera, URL, or existing file or folder; " + (
        "examples: 0, /dev/video0, video.mp4, rtsp://host/stream, ./images/"
    )


@pytest.mark.process
def test_a_path_from_the_home_folder_is_read_as_a_shell_reads_it(tmp_path, monkeypatch):
    """`source: ~/clips/door.avi` went to FFmpeg as written (FFmpeg expands no `~`): "cannot be opened", and the
    camera reconnected for good; `data_dir: ~/edge` made a folder named `~` wherever edge started. A path quoted in
    `edge detect '~/cat.jpg'` (or passed by a script) was "no such file". Each is now the home folder's."""
    home = tmp_path / "home"
    for folder in ("clips", "models", "cams"):
        (home / folder).mkdir(parents=True)
    (home / "clips/door.avi").symlink_to(VTEST)
    (home / "models/door.onnx").symlink_to(SSD_ONNX)
    (home / "cat.jpg").symlink_to(CAT)
    (home / "token").write_text("a-token-of-the-user\n")
    (home / "cams/streams.yaml").write_text(
        "server: {token_file: ~/token}\nstorage: {data_dir: ~/edge}\n"
        "streams:\n  - {id: door, source: ~/clips/door.avi, model: ~/models/door.onnx, backend: onnx, loop: true}\n"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    loaded = load_config(Path("~/cams/streams.yaml"))
    (stream,) = loaded.streams
    assert (stream.source, stream.model) == (str(home / "clips/door.avi"), str(home / "models/door.onnx"))
    assert (loaded.server.token_file, loaded.storage.data_dir) == (home / "token", home / "edge")
    assert Settings(data_dir="~/edge", config="~/cams/streams.yaml").data_dir == home / "edge"
    for source in (open_source("~/clips/door.avi"), ffmpeg_source("~/clips/door.avi")):
        source.open()
        try:
            frame = source.read()
        finally:
            source.close()
        assert frame is not None and frame.shape[:2] == (576, 768)
    with app_client(loaded, {"Authorization": "Bearer a-token-of-the-user"}) as client:
        deadline, latest = time.monotonic() + 120, client.get("/api/v1/streams/door/detections/latest")
        while latest.status_code == 503 and time.monotonic() < deadline:  # the model still loading
            time.sleep(0.1)
            latest = client.get("/api/v1/streams/door/detections/latest")
        assert latest.status_code == 200 and latest.json()["width"] == 768
    assert not (tmp_path / "~").exists()

    proc = run_edge("detect", "~/cat.jpg", "-m", "~/models/door.onnx", "-b", "onnx", "--save", "~/out",
                    "--json", env={"HOME": str(home)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "cat" in [d["label"] for d in json.loads(proc.stdout)["detections"]]
    assert [p.name for p in (home / "out").iterdir()] == ["cat.jpg"]


def _serve_missing(cams: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`edge serve --config ../cams/missing.yaml` started in `cwd`, as a user runs it."""
    (cams / "missing.yaml").write_text("streams:\n  - {id: gone, source: clips/gone.avi, model: models/door.onnx}\n")
    return subprocess.run(
        [sys.executable, "-m", "edge_inference", "serve", "--config", "../cams/missing.yaml"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.process
def test_one_camera_named_by_two_streams_is_refused_at_start_in_one_line(tmp_path):
    """A second stream on a USB camera (to run a second model on it) failed to open forever, with advice about
    other programs and the 'video' group, while the program holding the camera was this one."""
    from edge_inference.edge.config import ConfigError
    from edge_inference.edge.runtime.streams import check_cameras_read_once

    def streams(*sources: str) -> list:
        config = {"streams": [{"id": f"s{i}", "source": source} for i, source in enumerate(sources)]}
        return ServiceConfig.model_validate(config).streams

    check_cameras_read_once(streams("0", "/dev/video1", str(VTEST), str(VTEST), "rtsp://127.0.0.1:1/a"))
    by_id = "/dev/v4l/by-id/usb-046d_HD_Pro_Webcam_C920-video-index0"  # unplugged here: the name itself
    for pair, device in [(("0", "/dev/video0"), "/dev/video0"), ((by_id, f" {by_id}"), by_id)]:
        try:
            check_cameras_read_once(streams(*pair))
        except ConfigError as exc:
            assert str(exc) == (
                f"streams s0 and s1 both read the camera {device}, which gives its frames to one reader: give it one "
                "stream (to compare backends on it, `compare:` on that stream)"
            )
        else:
            raise AssertionError(f"{pair} was accepted")
    config = tmp_path / "streams.yaml"
    config.write_text("streams:\n  porch: {source: 0}\n  porch-night: {source: /dev/video0, model: nanodet-m}\n")
    (line,) = errors_of(run_edge("serve", "--config", str(config), "--port", "0"))
    assert line.startswith("error: streams porch and porch-night both read the camera /dev/video0")


@pytest.mark.process
def test_models_describe_says_which_engine_and_file_it_describes():
    """The file named, on an engine that reads it, measured by nobody; an engine named takes its own file of a
    family, and the JSON says which."""
    proc = run_edge("models", "describe", "--model", "yolox-nano", timeout=300)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert (info["model"], info["backend"]) == ("yolox-nano", "onnx") and "--backend auto" not in proc.stderr
    tflite = run_edge("models", "describe", "yolox-nano", "-b", "tflite", timeout=300)
    assert tflite.returncode == 0, tflite.stderr
    assert json.loads(tflite.stdout)["model"] == "yolox-nano-tflite"


def test_the_bench_chart_names_each_device_once():
    ran = PairResult(Pair("yolox-nano", "openvino", "CPU"), device="CPU")
    assert plot_label(ran) == "yolox-nano @ openvino\nCPU"
    asked = PairResult(Pair("yolox-nano", "onnx"), device="CPUExecutionProvider")
    assert plot_label(asked) == "yolox-nano @ onnx\nCPUExecutionProvider"


@pytest.mark.process
def test_an_edge_variable_spelled_nearly_right_is_named_with_the_one_meant():
    """`EDGE_MQTT_URI` in a compose file was read by nothing, and events never reached the broker, without a word.
    A user's own variables for a config's `${...}` are not taken for typos."""
    from edge_inference.edge.settings import OTHER_VARIABLES, misspelled_variables
    from tests.conftest import REPO

    compose = {
        "EDGE_MQTT_URI": "mqtt://broker:1883",
        "EDGE_TOKENFILE": "/run/secrets/token",
        "EDGE_MODEL_MIROR": "/models",
        "EDGE_CAM_PASSWORD": "for ${EDGE_CAM_PASSWORD} in the config",
        "EDGE_DEBUG": "1",
        "PATH": "/usr/bin",
    }
    assert misspelled_variables(compose) == [
        "EDGE_MODEL_MIROR is not read by edge: did you mean EDGE_MODEL_MIRROR?",
        "EDGE_MQTT_URI is not read by edge: did you mean EDGE_MQTT_URL?",
        "EDGE_TOKENFILE is not read by edge: did you mean EDGE_TOKEN_FILE?",
    ]
    every_known = {f"EDGE_{name.upper()}": "x" for name in Settings.model_fields} | dict.fromkeys(OTHER_VARIABLES, "x")
    assert misspelled_variables(every_known) == []
    # every EDGE_* name the code reads is among those known, so none of them is ever called a typo
    named = {
        match
        for folder in ("edge", "cli", "service", "backends", "models")
        for path in (REPO / folder).rglob("*.py")
        if path.name != "settings.py"  # its docstring's examples of typos and of a user's own variable
        for match in re.findall(r"\bEDGE_[A-Z][A-Z_]*[A-Z]\b", path.read_text())
    }
    assert named <= set(every_known), named - set(every_known)
    # said by every command, not only `edge serve`: `edge detect` and `edge models` read the mirror and cache too
    proc = run_edge("models", "list", env={"EDGE_MODEL_MIROR": "/models"})
    assert "note: EDGE_MODEL_MIROR is not read by edge: did you mean EDGE_MODEL_MIRROR?" in proc.stderr, proc.stderr


def test_a_stream_address_typed_slightly_wrong_is_read_or_answered_with_the_one_meant():
    """`RTSP://` as some camera apps print it (FFmpeg reads schemes in lower case only), and the slips of typing one
    by hand: each was "is not a camera, URL, or existing file or folder" with the generic examples."""
    from edge_inference.edge.stream.sources import SourceError

    assert open_source("RTSP://127.0.0.1:8554/live").target == "rtsp://127.0.0.1:8554/live"
    assert open_source("HTTP://127.0.0.1/snap.jpg").target == "http://127.0.0.1/snap.jpg"
    for typed, meant in [
        ("rstp://192.168.1.5:554/live", "rtsp://192.168.1.5:554/live"),
        ("rtsp:/192.168.1.5/live", "rtsp://192.168.1.5/live"),
        ("rtsp//192.168.1.5/live", "rtsp://192.168.1.5/live"),
        ("192.168.1.5:554/Streaming/Channels/101", "rtsp://192.168.1.5:554/Streaming/Channels/101"),
        ("htp://192.168.1.5/snap.jpg", "http://192.168.1.5/snap.jpg"),
        ("rtsp://admin:secret@192.168.1.5:554".replace("rtsp://", "rtsp:/"), "rtsp://admin:***@192.168.1.5:554"),
    ]:
        with pytest.raises(SourceError) as refused:
            open_source(typed)
        assert f"(did you mean {meant}?)" in str(refused.value) and "secret" not in str(refused.value)
    with pytest.raises(SourceError, match="examples: 0, /dev/video0"):
        open_source("missing-clip.mp4")  # a file that is not there is not taken for an address


def test_a_stream_address_typed_slightly_wrong_in_a_config_is_not_read_as_a_file_beside_it(tmp_path):
    """A config's relative paths are read from its folder: `rtsp:/cam` became `/etc/edge/rtsp:/cam`, a file that is
    not there, and no hint could be given."""
    from edge_inference.edge.stream.sources import SourceError

    config = tmp_path / "streams.yaml"
    config.write_text(
        "streams:\n  - {id: a, source: 'rtsp:/admin:secret@192.168.1.5/live'}\n  - {id: b, source: clip.mp4}\n"
    )
    first, second = load_config(config).streams
    assert second.source == str(tmp_path / "clip.mp4")
    with pytest.raises(SourceError) as refused:
        open_source(first.source)
    assert "(did you mean rtsp://admin:***@192.168.1.5/live?)" in str(refused.value)
    assert "secret" not in str(refused.value) and str(tmp_path) not in str(refused.value)


@pytest.mark.process
def test_a_path_typed_slightly_wrong_is_answered_with_the_file_meant(tmp_path):
    """A file named from memory (`cat.jpg` for cat_720p.jpg, `vtst.avi`, `yolox-nano.onnx` for yolox_nano.onnx,
    `streams.yml`, a folder `medai/`) was "no such file" or "does not exist" with nothing more: the user had to `ls`
    every folder on the way. Each message now names the file or folder nearest to what was typed."""
    from edge_inference.edge.detection.model_files import resolve_model
    from edge_inference.edge.errors import EdgeError
    from edge_inference.service.access import AccessPolicy

    media = tmp_path / "media"
    media.mkdir()
    for name in ("cat_720p.jpg", "vtest.avi", "yolox_nano.onnx", "streams.yaml", "token"):
        (media / name).write_bytes(b"x")
    proc = run_edge("detect", str(media / "cat.jpg"), str(media / "CAT_720P.JPG"), "-m", "yolox-nano")
    assert errors_of(proc) == [
        f"error: {media / 'cat.jpg'}: no such file; did you mean {media / 'cat_720p.jpg'}?",
        f"error: {media / 'CAT_720P.JPG'}: no such file; did you mean {media / 'cat_720p.jpg'}?",
    ]
    with pytest.raises(EdgeError) as model:
        resolve_model(str(media / "yolox-nano.onnx"), [])
    assert str(model.value).endswith(f"does not exist; did you mean {media / 'yolox_nano.onnx'}?")
    with pytest.raises(EdgeError) as source:
        open_source(str(tmp_path / "medai" / "vtest.avi"))
    assert str(source.value).endswith(f"there is no folder {tmp_path / 'medai'} (did you mean {media}?)")
    with pytest.raises(EdgeError) as video:
        open_source(str(media / "vtst.avi"))
    assert f"did you mean {media / 'vtest.avi'}?" in str(video.value)
    with pytest.raises(ConfigError, match=re.escape(f"did you mean {media / 'streams.yaml'}?")):
        load_config(media / "streams.yml")
    with pytest.raises(EdgeError, match=re.escape(f"there is no token file {media / 'tokn'}; did you mean")):
        AccessPolicy.from_config(ServerConfig(token_file=media / "tokn"), Settings())
    with pytest.raises(EdgeError) as unrelated:  # nothing near: no guess
        resolve_model(str(media / "detector.onnx"), [])
    assert str(unrelated.value) == f"model file {media / 'detector.onnx'} does not exist"


@pytest.mark.process
def test_a_file_one_folder_down_and_a_label_file_are_answered_with_the_file_meant(tmp_path):
    """`-m models/yolox_nano.onnx` for models/onnx/yolox_nano.onnx (the layout most model folders have) and
    `/srv/vtest.avi` for /srv/media/vtest.avi were "does not exist" with no hint, and a mistyped `--labels` was
    "cannot read label file ...: No such file or directory", said only after the engine had loaded the model. Both
    now name the file meant, and the label file is checked before any engine is loaded."""
    models = tmp_path / "models"
    for folder in ("onnx", "tflite", "labels"):
        (models / folder).mkdir(parents=True)
    (models / "onnx" / "yolox_nano.onnx").write_bytes(b"x")  # not a model: nothing may load it
    (models / "labels" / "coco_classes_80.txt").write_text("person\n")
    photo = tmp_path / "media" / "cat_720p.jpg"
    photo.parent.mkdir()
    shutil.copy(MEDIA / "cat_720p.jpg", photo)
    model = models / "onnx" / "yolox_nano.onnx"
    proc = run_edge("detect", str(photo), "-m", str(models / "yolox_nano.onnx"))
    assert errors_of(proc) == [
        f"error: model file {models / 'yolox_nano.onnx'} does not exist; it is one folder down: did you mean {model}?"
    ]
    proc = run_edge("detect", str(tmp_path / "cat_720p.jpg"), str(photo), "-m", str(model))
    down = "it is one folder down: did you mean"
    assert errors_of(proc)[0] == f"error: {tmp_path / 'cat_720p.jpg'}: no such file; {down} {photo}?"
    meant = models / "labels" / "coco_classes_80.txt"
    for typed, hint in (("coco_classes_80.txt", down), ("labels/coco_clases_80.txt", "did you mean")):
        proc = run_edge("detect", str(photo), "-m", str(model), "--labels", str(models / typed))
        assert errors_of(proc) == [f"error: label file {models / typed} does not exist; {hint} {meant}?"]


def test_one_folder_down_names_only_the_same_file_not_any_short_name_spelled_alike(tmp_path):
    """`--labels /nope.txt` was answered "it is one folder down: did you mean /tmp/o.txt?": a fuzzy match on a short
    name in whichever folder beside it came first. One folder down is for the same file (a folder left out of the
    path), not for some other file that happens to be spelled alike."""
    from edge_inference.edge.config.paths import path_meant

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "o.txt").write_text("x")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "nopes.txt").write_text("x")
    assert path_meant(tmp_path / "nope.txt") == ""
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "Nope.txt").write_text("x")  # the same name but for case: the file meant
    assert path_meant(tmp_path / "nope.txt") == f"it is one folder down: did you mean {tmp_path / 'c' / 'Nope.txt'}?"


@pytest.mark.process
@pytest.mark.skipif(not shutil.which("ffmpeg") or not shutil.which("ffprobe"), reason="needs Debian's ffmpeg")
def test_a_file_with_sound_and_no_picture_is_called_that_not_an_undecodable_video(tmp_path):
    """A doorbell's audio clip, an .m4a or .mp3 named as a source: "the file is missing or not a video FFmpeg can
    decode" (OpenCV's source) and "ffmpeg says 'Output file #0 does not contain any stream'" (the FFmpeg source) sent
    the user to check a file that was there and fine. Both now say it holds sound only; a file that went away (a NAS
    unmounted under a running stream) is said to be gone, not undecodable."""
    from edge_inference.edge.stream.ffmpeg import FFmpegSettings, FFmpegSource
    from edge_inference.edge.stream.sources import CaptureSource, SourceError

    tone = tmp_path / "doorbell.mp4"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "sine=duration=1", str(tone)], check=True)
    capture = CaptureSource(str(tone), live=False)
    with pytest.raises(SourceError, match=r"cannot be opened: it holds sound only \(aac\), no picture"):
        capture.open()
    piped = FFmpegSource(str(tone), FFmpegSettings(live=False, width=320))
    try:
        with pytest.raises(SourceError, match=r"could not be opened: it holds sound only \(aac\), no picture"):
            piped.open()
    finally:
        piped.close()
    tone.rename(tmp_path / "moved.mp4")
    with pytest.raises(SourceError, match=r"the file is not there \(moved, deleted, or a drive not mounted\)"):
        capture.open()
    proc = run_edge("detect", str(tmp_path / "moved.mp4"), "-m", "yolox-nano")
    assert errors_of(proc) == [f"error: {tmp_path / 'moved.mp4'}: cannot be opened as a video: it holds sound only "
                               "(aac), no picture: give a file with a video track"]  # fmt: skip


@pytest.mark.process
def test_onnx_runtime_sends_nothing_and_keeps_no_device_id_in_the_users_home(tmp_path):
    """ONNX Runtime's wheels since 1.32 upload usage telemetry from Linux (Microsoft's 1DS) and keep a device id in
    ~/.cache/Microsoft; a service user whose home cannot be written saw "Failed to persist telemetry device ID" on
    every command. The child decides for itself: none of the opt-outs (ONNX Runtime's own names, a CI flag) is
    handed down from this process."""
    ci_flags = ("CI", "TF_BUILD", "GITHUB_ACTIONS", "GITLAB_CI", "JENKINS_URL", "BUILDKITE", "TEAMCITY_VERSION")
    env = {key: value for key, value in os.environ.items() if not key.startswith("ORT_") and key not in ci_flags}
    env["HOME"] = str(tmp_path)
    command = [sys.executable, "-m", "edge_inference", "detect", CAT, "-m", "yolox-nano", "-b", "onnx", "--json"]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (tmp_path / ".cache" / "Microsoft").exists(), list(tmp_path.rglob("*"))
    assert "telemetry" not in proc.stderr
