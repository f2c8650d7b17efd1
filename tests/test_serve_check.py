"""`edge serve --check`: a config tried without serving it (nginx -t, Frigate's --validate-config, Home Assistant's
check_config), on real sources, engines and a real broker, beside a service that runs on the same config."""

from __future__ import annotations

import re
import time

import pytest

from tests.conftest import VTEST
from tests.helpers import run_edge
from tests.mosquitto import Broker
from tests.server import free_port, running_server

pytestmark = pytest.mark.process


def _config(folder, broker_url: str | None, streams: str) -> str:
    path = folder / "cams.yml"
    mqtt = f"mqtt:\n  url: {broker_url}\n" if broker_url else ""
    path.write_text(f"streams:\n{streams}\n{mqtt}storage:\n  data_dir: {folder / 'data'}\n")
    return str(path)


DOOR = f"""  - id: door
    source: {VTEST}
    loop: true
    tracking: {{}}
    events: {{}}
"""


def test_a_check_beside_the_running_service_reports_what_starting_would_meet_and_leaves_the_service_alone(tmp_path):
    """Before: a config was tried only by starting it, which beside the running service meant a second one on the
    same camera, port, data folder and broker identity. The check opens the source, runs the engine on its first
    frame, logs in to the broker under a client id of its own, and reads the data folder's lock without taking it:
    the running service keeps its broker connection and its events."""
    broker = Broker(tmp_path / "broker", users={"edge": "right-password"})
    broker.start()
    try:
        config = _config(tmp_path, f"mqtt://edge:right-password@127.0.0.1:{broker.port}", DOOR)
        with running_server(["--config", config], tmp_path / "serve.log") as server:
            server.wait_until("/health/ready")
            _wait_connected(server)
            checked = run_edge("serve", "--config", config, "--port", str(server.port), "--check")
            assert checked.returncode == 0, checked.stdout + checked.stderr
            out = checked.stdout
            assert f"stream door: {VTEST}: opened, a 768x576 frame read" in out
            engine = next(line for line in out.splitlines() if line.startswith("stream door: yolox-nano on "))
            assert re.search(r": \d+ person\b.* on the first frame", engine), engine  # vtest.avi's walkers
            assert f"mqtt: mqtt://127.0.0.1:{broker.port} logs in user edge" in out
            assert re.search(r"warning: storage: events are kept in .*data, which edge \(process \d+ on ", out), out
            assert f"warning: port: 127.0.0.1:{server.port} is in use now" in out
            assert out.rstrip().endswith("check passed: the service would start 1 stream; 2 warnings")
            assert "Traceback" not in checked.stderr
            time.sleep(2)  # a broker drops the older of two clients of one id at once; the service's loss would show
            stats = server.client.get("/api/v1/stats").json()["events"]
            assert stats["mqtt_connected"] and stats["storage_problem"] is None, stats
            assert "MQTT broker" not in server.log, server.log  # neither unreachable nor refused since it started
        log = (broker.folder / "mosquitto.log").read_text()
        service_ids = set(re.findall(r"as (edge-inference-(?!check)\S+) ", log))
        assert len(service_ids) == 1, log  # the service connected once and stayed until it stopped
    finally:
        broker.stop()


def test_a_check_names_every_problem_at_once_one_line_each_and_fails(tmp_path):
    """A config with a missing video, a camera nobody answers for, a model name typed wrong, a label the model
    does not have and a broker password typed wrong: each is its own line, the good stream is still checked,
    nothing is a traceback, no password is printed, and the exit status says the service would not run as asked."""
    broker = Broker(tmp_path / "broker", users={"edge": "right-password"})
    broker.start()
    streams = (
        DOOR
        + f"""  - id: back
    source: {VTEST.with_name("back_door.avi")}
  - id: porch
    source: rtsp://admin:cam-secret@127.0.0.1:{free_port()}/live
  - id: garage
    source: {VTEST}
    model: yolox-nan
  - id: drive
    source: {VTEST}
    backend: onnx
    classes: [persons]
"""
    )
    try:
        config = _config(tmp_path, f"mqtt://edge:wrong-password@127.0.0.1:{broker.port}", streams)
        checked = run_edge("serve", "--config", config, "--check", "--port", str(free_port()))
    finally:
        broker.stop()
    out = checked.stdout
    assert checked.returncode == 1, out + checked.stderr
    assert "Traceback" not in checked.stderr and "cam-secret" not in out + checked.stderr
    assert f"stream door: {VTEST}: opened, a 768x576 frame read" in out  # the good stream, checked all the same
    assert "problem: stream back: source " in out and "back_door.avi" in out
    assert "problem: stream porch: stream rtsp://admin:***@127.0.0.1:" in out and "nothing listens at" in out
    assert re.search(r"problem: stream garage: .*yolox-nan", out), out
    assert re.search(r"warning: stream drive: classes names 'persons' \(did you mean 'person'\?\)", out), out
    assert "problem: mqtt: " in out and "Not authorized" in out
    assert out.rstrip().endswith("check failed: 4 problems (above); 1 warning"), out


def test_a_check_on_a_machine_where_auto_was_never_measured_measures_nothing(tmp_path):
    """`--backend auto` times every engine for up to minutes when a model first runs on a machine; a check (an
    ExecStartPre, a deploy script) must not, and must not leave a measurement made under its own conditions. It
    runs the ranking's choice and says the service will time the engines."""
    stored = tmp_path / "auto.json"
    config = _config(tmp_path, None, DOOR)
    checked = run_edge(
        "serve", "--config", config, "--check", "--port", str(free_port()), env={"EDGE_AUTO_CACHE": str(stored)}
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "not measured on this machine yet (the service times the engines)" in checked.stdout
    assert "person" in checked.stdout
    time.sleep(1)  # a measurement started in the background would have written by now, or be writing
    assert not stored.exists()


def _wait_connected(server, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not server.client.get("/api/v1/stats").json()["events"]["mqtt_connected"]:
        assert time.monotonic() < deadline, server.log
        time.sleep(0.1)


@pytest.mark.process
def test_a_port_in_use_is_said_before_any_model_is_looked_at():
    """The port was taken only once every model had been resolved: 40 s of loading before "in use" on a Pi. A model
    that does not exist would be refused there; the busy port is said first."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_edge("serve", "--source", str(VTEST), "--model", "no-such-model", "--port", str(port))
    assert proc.returncode != 0 and f"cannot listen on 127.0.0.1:{port}" in proc.stderr, proc.stderr
    assert "no-such-model" not in proc.stderr


@pytest.mark.process
def test_a_file_that_ends_is_said_and_exit_at_end_gives_a_script_its_prompt_back(tmp_path):
    """`edge serve` of a file kept serving after its end with health ok and nothing said: the log says the file
    ended, and `--exit-at-end` stops the service then, with status 0."""
    from tests.helpers import write_clip

    clip = write_clip(VTEST, tmp_path / "short.avi", 12)
    proc = run_edge(
        "serve", "--source", str(clip), "--model", "ssd-mobilenet-v2", "--no-pace", "--exit-at-end", "--port", "0",
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "stream main: ended (the file played to its end" in proc.stderr
    assert "every source has ended: stopping (--exit-at-end)" in proc.stderr and "Traceback" not in proc.stderr
