"""`edge doctor` on this machine, and on a fake Raspberry Pi 5 whose Coral sits on a USB 2 port, whose Hailo node
the service's user may not open and whose CPU has been throttled: each problem reported with its fix."""

from __future__ import annotations

import json
import pwd

import pytest

from tests import fake_devices
from tests.helpers import run_edge


def _doctor(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    proc = run_edge("doctor", "--json", *args, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _by_subject(report: dict) -> dict[str, dict]:
    return {f["subject"]: f for f in report["findings"]}


def test_doctor_on_this_machine():
    code, report = _doctor()
    findings = _by_subject(report)
    assert code == 0 and report["blocks_serving"] is False
    assert findings["onnx"]["status"] == "ok" and findings["onnx"]["detail"].startswith("onnxruntime ")
    assert {f["section"] for f in report["findings"]} >= {"engines", "devices", "cameras", "system", "models"}
    text = run_edge("doctor")
    assert text.returncode == 0 and "nothing blocks serving" in text.stdout and "engines" in text.stdout


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


def test_a_model_cache_that_cannot_be_written_blocks_serving(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    code, report = _doctor(env={"EDGE_MODEL_CACHE": str(tmp_path / "file" / "models")})
    cache = next(f for f in report["findings"] if f["section"] == "models" and f["status"] == "fail")
    assert code == 1 and report["blocks_serving"] and "EDGE_MODEL_CACHE" in cache["fix"]
    assert run_edge("doctor", "--user", "no-such-user-here").stderr.startswith("error: no user named")


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
