"""A whole Frigate config given to `edge serve --config`: read as its cameras, detector and model, with what it
asks for that is not done here named, not refused."""

from __future__ import annotations

import re
import shutil
import time

import pytest

from edge_inference.edge.config import ConfigError, load_config
from tests.conftest import MODELS, VTEST
from tests.helpers import run_edge
from tests.server import free_port, running_server

FRIGATE = f"""
mqtt:
  host: 127.0.0.1
  user: "{{FRIGATE_MQTT_USER}}"
  password: "{{FRIGATE_MQTT_PASSWORD}}"
  stats_interval: 60
  qos: 1
detectors:
  cpu1:
    type: cpu
    num_threads: 1
ffmpeg:
  hwaccel_args: auto
detect: {{width: 640, height: 480, fps: 5}}
objects:
  filters:
    person: {{min_score: 0.4, threshold: 0.7}}
record: {{enabled: true, retain: {{days: 7}}}}
snapshots: {{enabled: true}}
go2rtc:
  streams:
    back:
      - rtsp://viewer:{{FRIGATE_RTSP_PASSWORD}}@192.0.2.10:554/stream1
      - "ffmpeg:back#audio=opus"
cameras:
  front:
    ffmpeg:
      inputs:
        - path: {VTEST}
          roles: [detect, record]
    motion:
      threshold: 40
      contour_area: 10
      mask:
        car_park: {{coordinates: "0,0,0.3,0,0.3,0.2"}}
    zones:
      porch: {{coordinates: "0.1,0.5,0.9,0.5,0.9,1,0.1,1", objects: [person], inertia: 3}}
    onvif: {{host: 192.0.2.11}}
  back:
    ffmpeg:
      hwaccel_args: preset-vaapi
      inputs:
        - path: rtsp://127.0.0.1:8554/back
          input_args: preset-rtsp-restream
          roles: [detect]
  garage:
    enabled: false
    ffmpeg: {{inputs: [{{path: "rtsp://192.0.2.12/live", roles: [detect]}}]}}
"""


def test_a_whole_frigate_config_is_read_as_its_cameras_detector_and_model(tmp_path, monkeypatch):
    """A Frigate user's file was "cameras: not a setting (did you mean streams?); model: not a setting;
    detectors.cpu1: not a setting": nothing of it ran. Its cameras are now the streams (Frigate's global blocks
    merged into each, a disabled camera left out, a go2rtc restream read from the camera go2rtc reads,
    `{FRIGATE_*}` from the environment), its CPU detector LiteRT with the model Frigate runs there, its broker
    the MQTT block; recording, snapshots and ONVIF are named as left out."""
    monkeypatch.setenv("FRIGATE_MQTT_USER", "frigate")
    monkeypatch.setenv("FRIGATE_MQTT_PASSWORD", "mqtt-secret")
    monkeypatch.setenv("FRIGATE_RTSP_PASSWORD", "rtsp-secret")
    path = tmp_path / "config.yml"
    path.write_text(FRIGATE)
    config = load_config(path)
    front, back = config.streams
    assert [front.id, back.id] == ["front", "back"]  # garage is disabled there
    assert (front.source, front.backend, front.threads, front.model) == (str(VTEST), "tflite", 1, "ssd-mobilenet-v2")
    assert (front.width, front.height, front.fps, front.classes) == (640, 480, 5, {"person": 0.4})
    assert front.ffmpeg is not None and front.ffmpeg.hwaccel is None  # Frigate's `auto`: software here, said
    assert front.motion is not None and front.motion.pixel_threshold == 40
    assert front.motion.ignore == [[(0, 0), (0.3, 0), (0.3, 0.2)]]
    assert [(zone.name, len(zone.polygon)) for zone in front.zones] == [("porch", 4)]
    assert back.source == "rtsp://viewer:rtsp-secret@192.0.2.10:554/stream1"  # not Frigate's own go2rtc
    assert back.ffmpeg is not None and (back.ffmpeg.hwaccel, back.ffmpeg.input_args) == (
        "preset-vaapi",
        "preset-rtsp-generic",
    )
    assert back.classes == {"person": 0.4} and back.motion is not None  # Frigate tracks people, on motion
    assert config.mqtt is not None and config.mqtt.username == "frigate" and config.mqtt.stats_interval_s == 60
    assert config.mqtt.password is not None and config.mqtt.password.get_secret_value() == "mqtt-secret"
    notes = "\n".join(config.notes)
    assert "read as a Frigate config: 2 camera(s) as streams (front, back)" in notes
    assert "cameras.garage left out: it is disabled" in notes
    assert "model /cpu_model.tflite is Frigate's built-in file: the registry's ssd-mobilenet-v2 runs instead" in notes
    left_out = next(note for note in config.notes if note.startswith("left out, not done here: "))
    for key in (
        "record",
        "snapshots",
        "go2rtc",
        "mqtt.qos",
        "cameras.front.onvif",
        "cameras.front.motion.contour_area",
    ):
        assert key in left_out.split(": ", 1)[1].split(", "), (key, left_out)
    assert (
        "cameras.front.zones.porch.objects" in left_out and "cameras.back.objects.filters.person.threshold" in left_out
    )
    assert "rtsp-secret" not in notes


def test_a_frigate_config_that_cannot_run_here_says_what_to_change(tmp_path, monkeypatch):
    """A detector with no engine here, a Frigate+ model, a typo in a camera or at the top (answered with Frigate's
    key, not with this config's, which the user did not write), detection switched off on every camera (Frigate
    0.16's default for a new file) and a password left unset: each is one line naming the camera or block as the
    Frigate file writes it."""
    path = tmp_path / "config.yml"
    monkeypatch.setenv("FRIGATE_MQTT_USER", "u")
    monkeypatch.setenv("FRIGATE_MQTT_PASSWORD", "p")
    for change, answer in [
        (("type: cpu", "type: deepstack"), "detectors.cpu1: Frigate's deepstack detector has no engine here"),
        (("  qos: 1", "  qos: 1\nmodel: {path: 'plus://abc123'}"), "a Frigate+ model"),
        (
            ("    onvif:", "    detekt: {fps: 5}\n    onvif:"),
            "cameras.front.detekt: not a setting of a Frigate camera (did you mean detect?)",
        ),
        (("snapshots:", "snapshot:"), "snapshot: not a setting of a Frigate config (did you mean snapshots?)"),
        (("    onvif:", "    pan: 5\n    onvif:"), "cameras.front.pan: not a setting of a Frigate camera; a Frigate"),
        (('"0,0,0.3,0,0.3,0.2"', '"0,0,1"'), "cameras.front.motion.mask: 3 numbers"),
        (("detect: {width", "detect: {enabled: false, width"), "cameras: none of front, back, garage detects"),
        (("cameras:", "cameras:"), "${FRIGATE_RTSP_PASSWORD} is not set in edge's environment"),
    ]:
        if "RTSP" in answer:
            monkeypatch.delenv("FRIGATE_RTSP_PASSWORD")
        else:
            monkeypatch.setenv("FRIGATE_RTSP_PASSWORD", "p")
        path.write_text(FRIGATE.replace(*change))
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        assert answer in str(caught.value), (change, caught.value)


@pytest.mark.process
@pytest.mark.skipif(not shutil.which("ffmpeg"), reason="needs Debian's ffmpeg")
def test_edge_serve_runs_a_frigate_camera_on_the_cpu_detector_and_says_what_it_left_out(tmp_path):
    """The file runs, not only reads: `edge serve --config` on Frigate's camera and CPU detector finds people on the
    pedestrian video, and its first lines say how the file was read and what of it is not done here."""
    path = tmp_path / "config.yml"
    path.write_text(FRIGATE[FRIGATE.index("detectors:") : FRIGATE.index("\n  back:")])  # no broker, one camera
    with running_server(["--config", str(path)], tmp_path / "log") as server:
        deadline = time.monotonic() + 120
        labels: set[str] = set()
        while not labels:
            assert time.monotonic() < deadline, server.log
            latest = server.wait_until("/api/v1/streams/front/detections/latest", timeout=120)
            labels = {d["label"] for d in latest.json()["detections"]}
            time.sleep(0.1)
        assert labels == {"person"}
        notes = [line for line in server.log.splitlines() if line.startswith("note: ")]
    assert notes[0] == "note: read as a Frigate config: 1 camera(s) as streams (front)"
    assert "note: detector cpu1 (cpu) runs as backend tflite, device auto" in notes
    assert any(note.startswith("note: left out, not done here: go2rtc, record, snapshots, ") for note in notes)


@pytest.mark.process
def test_a_frigate_model_of_ones_own_runs_with_its_label_map_and_colour_order(tmp_path):
    """Frigate's `model:` for a model of one's own names its label map (`0  person` lines) and colour order, which
    the file does not say; they were dropped with a note, so a custom model's classes came out as COCO's names. They
    are now the streams' `labels:` and `color:`: the check runs the engine on the camera's first frame and reports
    the label map's names. A YUV model is refused, and Frigate's built-in COCO list leaves the model's own labels."""
    labels = tmp_path / "labelmap.txt"
    labels.write_text("0  pedestrian\n1  bicycle\n2  vehicle\n")
    frigate = f"""
detectors:
  ov: {{type: onnx}}
model:
  path: {MODELS / "onnx/yolox_nano.onnx"}
  labelmap_path: {labels}
  input_pixel_format: bgr
  model_type: yolox
cameras:
  front:
    ffmpeg: {{inputs: [{{path: {VTEST}, roles: [detect]}}]}}
    objects: {{track: [pedestrian, vehicle]}}
"""
    path = tmp_path / "config.yml"
    path.write_text(frigate)
    (front,) = load_config(path).streams
    assert (str(front.labels), front.color, front.backend) == (str(labels), "BGR", "onnx")
    checked = run_edge("serve", "--config", str(path), "--check", "--port", str(free_port()))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert re.search(r"stream front: \S+yolox_nano.onnx on onnx .*: \d+ pedestrian, \d+ vehicle", checked.stdout)
    path.write_text(frigate.replace("input_pixel_format: bgr", "input_pixel_format: yuv"))
    with pytest.raises(ConfigError, match=r"model\.input_pixel_format yuv: a model that takes YUV frames"):
        load_config(path)
    path.write_text(frigate.replace(str(labels), "/labelmap/coco-80.txt"))
    config = load_config(path)
    assert config.streams[0].labels is None
    assert any("Frigate's built-in COCO list: the model's own labels are used" in note for note in config.notes)
