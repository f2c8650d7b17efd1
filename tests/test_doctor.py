"""`edge doctor` on this machine, and on a fake Raspberry Pi 5 whose Coral sits on a USB 2 port, whose Hailo node
the service's user may not open and whose CPU has been throttled: each problem reported with its fix."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import cv2
import pytest

from edge_inference.edge.detection.threads import usable_cores
from edge_inference.models.download import pull
from edge_inference.models.registry import get_entry
from tests import fake_devices
from tests.conftest import MODELS, REPO, VTEST
from tests.helpers import run_edge
from tests.test_cli_detect import assert_one_clear_error
from tests.venvs import OPEN_CACHE, basic_install


def _doctor(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    proc = run_edge("doctor", "--json", *args, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _by_subject(report: dict) -> dict[str, dict]:
    return {f["subject"]: f for f in report["findings"]}


@pytest.mark.process
def test_doctor_on_this_machine():
    code, report = _doctor()
    findings = _by_subject(report)
    assert code == 0 and report["blocks_serving"] is False
    assert findings["onnx"]["status"] == "ok" and findings["onnx"]["detail"].startswith("onnxruntime ")
    assert {f["section"] for f in report["findings"]} >= {"engines", "devices", "cameras", "system", "models"}
    text = run_edge("doctor")
    assert text.returncode == 0 and "nothing blocks serving" in text.stdout and "engines" in text.stdout


@pytest.mark.process
@pytest.mark.skipif("nobody" not in {p.pw_name for p in pwd.getpwall()}, reason="needs the 'nobody' account")
def test_a_raspberry_pi_with_a_slow_coral_a_closed_hailo_node_and_a_throttled_cpu(tmp_path):
    root = tmp_path / "pi"
    fake_devices.raspberry_pi(root, throttled="0x50005")  # under-voltage and throttling, now and since boot
    fake_devices.usb_device(root, "1-1", "18d1", "9302", "480")
    fake_devices.write(root, "/sys/bus/usb/devices/1-1/busnum", "1\n")
    fake_devices.write(root, "/sys/bus/usb/devices/1-1/devnum", "4\n")
    fake_devices.write(root, "/dev/bus/usb/001/004", mode=0o664)  # root:root, as without the libedgetpu udev rule
    fake_devices.hailo(root, node_mode=0o600)
    fake_devices.write(root, "/proc/self/cgroup", "0::/\n")  # in a container limited to 256 MiB, 200 MiB used
    fake_devices.write(root, "/sys/fs/cgroup/memory.max", f"{256 * 2**20}\n")
    fake_devices.write(root, "/sys/fs/cgroup/memory.current", f"{200 * 2**20}\n")
    code, report = _doctor("--root", str(root), "--user", "nobody")
    findings = _by_subject(report)

    coral = findings["coral usb 1-1"]
    assert coral["status"] == "warn" and "USB 2 port (480 Mbit/s)" in coral["detail"] and "USB 3" in coral["fix"]
    hailo = findings["/dev/hailo0"]
    assert hailo["section"] == "permissions" and hailo["status"] == "warn"
    assert "nobody may not open it (-rw-------)" in hailo["detail"] and "51-hailo-udev.rules" in hailo["fix"]
    usb_node = findings["/dev/bus/usb/001/004"]
    assert usb_node["status"] == "warn" and "plugdev" in usb_node["fix"]
    throttling = findings["throttling"]
    assert throttling["status"] == "warn" and "power supply" in throttling["fix"]
    for reason in ("under-voltage now", "throttled now", "under-voltage has occurred", "throttling has occurred"):
        assert reason in throttling["detail"]
    assert findings["cpu-thermal"]["status"] == "ok" and findings["memory"]["status"] == "ok"
    limit = findings["memory limit"]
    assert limit["status"] == "warn" and limit["detail"].startswith("56 MiB left") and "--memory" in limit["fix"]
    assert code == 0 and not report["blocks_serving"]  # all of it costs speed or a device; the CPU still serves

    text = run_edge("doctor", "--root", str(root), "--user", "nobody").stdout
    assert text.count("fix:") >= 4 and "WARN  /dev/hailo0" in text


@pytest.mark.process
def test_a_model_cache_that_cannot_be_written_blocks_serving(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    code, report = _doctor(env={"EDGE_MODEL_CACHE": str(tmp_path / "file" / "models")})
    cache = next(f for f in report["findings"] if f["section"] == "models" and f["status"] == "fail")
    assert code == 1 and report["blocks_serving"] and "EDGE_MODEL_CACHE" in cache["fix"]
    assert run_edge("doctor", "--user", "no-such-user-here").stderr.startswith("error: no user named")


@pytest.mark.process
def test_doctor_lists_the_hardware_decoders_ffmpeg_and_the_board_offer(tmp_path):
    """On a fake Raspberry Pi 4 with its V4L2 decoder node, and an Intel render node: those presets are usable;
    the others say what is missing (FFmpeg's own lists, the device node)."""
    from tests.rtsp import require_ffmpeg

    require_ffmpeg()
    root = tmp_path / "pi"
    fake_devices.raspberry_pi(root)
    fake_devices.write(root, "/dev/video10", mode=0o660)
    fake_devices.write(root, "/dev/dri/renderD128", mode=0o660)
    _, report = _doctor("--root", str(root))
    decoders = {f["subject"]: f for f in report["findings"] if f["section"] == "decoders"}
    assert decoders["ffmpeg"]["status"] == "ok" and "vaapi" in decoders["ffmpeg"]["detail"]
    assert decoders["preset-rpi-64-h264"]["status"] == "ok" and decoders["preset-vaapi"]["status"] == "ok"
    missing = decoders["presets"]["detail"]
    assert "preset-nvidia (no /dev/nvidia0)" in missing and "preset-jetson-h264 (FFmpeg lacks h264_nvmpi)" in missing


SYSTEM_PYTHON = "/usr/bin/python3.11"  # Debian's: a Python any user may run (pyenv's lives under root's 0700 home)


@pytest.fixture(scope="module")
def nobodys_place() -> Iterator[Path]:
    """A folder `nobody` may enter (pytest's own temporary folders are root's alone: 0700)."""
    place = Path(tempfile.mkdtemp(prefix="edge-nobody-"))
    place.chmod(0o755)
    yield place
    shutil.rmtree(place, ignore_errors=True)


@pytest.fixture(scope="module")
def nobodys_edge(nobodys_place: Path) -> str:
    """The basic install in a venv any user may run, made by root; its Python, for `nobody` to run."""
    if not os.path.exists(SYSTEM_PYTHON):
        pytest.skip(f"{SYSTEM_PYTHON} is not here: no Python that an unprivileged user may run")
    root = nobodys_place
    source = root / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".*", "build", "*.egg-info", "__pycache__"))
    # the dependencies from a layer made once per machine where `nobody` may read it (tests/venvs.py)
    installed = basic_install(root / "venv", source, python=SYSTEM_PYTHON, cache=OPEN_CACHE)
    if installed.returncode != 0 and "No matching distribution" in installed.stderr:
        pytest.skip("the package index cannot be reached here")
    assert installed.returncode == 0, installed.stderr[-2000:]
    return str(root / "venv/bin/python")


def _as_nobody(python: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`edge ARGS` run by the unprivileged `nobody` (as the systemd unit's `edge` and the image's 10001 run it)."""
    command = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", python, "-m", "edge_inference"]
    return subprocess.run([*command, *args], capture_output=True, text=True, env=env, timeout=180, check=False, cwd="/")


@pytest.mark.system
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to be nobody")
def test_an_rk3588_board_is_looked_at_by_a_user_who_may_not_read_debugfs(nobodys_place, nobodys_edge):
    """The suite runs as root, so it never saw this: as the service's own user, `Path('/sys/kernel/debug/rknpu')
    .exists()` raises PermissionError (debugfs is 0700), and `edge backends`, `edge doctor` and the rknn engine's
    probe ended in "unexpected PermissionError". Not allowed is "cannot tell", and doctor says so."""
    root = nobodys_place / "root"
    fake_devices.rk3588(root)
    (root / "sys/kernel/debug").chmod(0o700)  # as debugfs is: root's alone
    home = nobodys_place / "home"
    home.mkdir(mode=0o777)
    home.chmod(0o777)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "EDGE_"))}
    env |= {"EDGE_SYSROOT": str(root), "HOME": str(home), "EDGE_MODEL_CACHE": str(home / "models")}
    backends = _as_nobody(nobodys_edge, "backends", env=env)
    assert backends.returncode == 0 and "Traceback" not in backends.stderr, backends.stderr[-2000:]
    assert "unexpected" not in backends.stdout + backends.stderr
    doctor = _as_nobody(nobodys_edge, "doctor", "--json", env=env)
    assert doctor.returncode == 0 and "Traceback" not in doctor.stderr, doctor.stderr[-2000:]
    findings = json.loads(doctor.stdout)["findings"]
    told = [f for f in findings if f["subject"] == "cannot tell"]
    assert told and "/sys/kernel/debug" in told[0]["detail"], findings


@pytest.mark.system
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to be nobody")
def test_a_users_detect_loop_measures_its_threads_and_auto_keeps_its_measurement_in_that_users_cache(
    nobodys_place, nobodys_edge
):
    """As the service's own unprivileged user (issue 62's paths: the loop's trial reads its own CPU time, auto's
    measurement reads the machine's load from /proc/stat and writes the user's cache): `edge detect --backend auto`
    over a short video says the loop's threads, and where the install has several engines, measures them and keeps
    the measurement in that user's cache."""
    home = nobodys_place / "home-loop"
    home.mkdir(mode=0o777)
    home.chmod(0o777)
    clip = nobodys_place / "walkway.mp4"
    capture = cv2.VideoCapture(str(VTEST))
    writer = cv2.VideoWriter(str(clip), cv2.VideoWriter.fourcc(*"mp4v"), 10, (768, 576))
    for _ in range(80):  # past the loop's first trial of its threads
        writer.write(capture.read()[1])
    writer.release()
    capture.release()
    clip.chmod(0o644)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "EDGE_"))}
    env |= {"HOME": str(home), "EDGE_MODEL_MIRROR": str(MODELS), "EDGE_AUTO_ROUND_S": "0.25"}
    proc = _as_nobody(nobodys_edge, "detect", str(clip), "-m", "yolox-nano", "--json", env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(records) == 80, proc.stderr[-2000:]
    assert ("engine_threads" in records[-1]) is (usable_cores() > 1)  # one core: no threads to choose
    cache = home / ".cache/edge-inference/auto-backend.json"
    if "the only engine here that runs it" in proc.stderr:  # the basic install may have one engine: nothing to time
        assert not cache.exists()
        return
    (entry,) = json.loads(cache.read_text()).values()
    assert isinstance(entry["others_busy_cores"], float) and len(entry["results"]) >= 2


@pytest.mark.system
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to be nobody")
def test_a_model_cache_the_user_may_not_enter_is_one_line(nobodys_place, nobodys_edge):
    """A unit run as its own user with `EDGE_MODEL_CACHE` left at root's cache (root's home is 0700): every command
    that looks for a registry model (`detect`, `models convert`, `models list`, a stream of `serve`) ended in
    "unexpected PermissionError" (Python's `is_file` raises for a folder it may not enter)."""
    cache = nobodys_place / "roots-cache"
    pull(get_entry("yolox-nano"), cache / "models", str(MODELS))
    cache.chmod(0o700)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "EDGE_"))}
    env |= {"HOME": "/nonexistent", "EDGE_MODEL_CACHE": str(cache / "models"), "EDGE_MODEL_MIRROR": str(MODELS)}
    photo = str(MODELS.parent / "media" / "kite_and_cold.jpg")
    for args in (("detect", photo, "-m", "yolox-nano"), ("models", "list")):
        proc = _as_nobody(nobodys_edge, *args, env=env)
        assert_one_clear_error(proc, f"cannot read the model cache {cache / 'models'} (", "set EDGE_MODEL_CACHE")
