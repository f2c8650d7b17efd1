"""A real RTSP camera (GStreamer's RTSP server, run by `tests/rtsp_camera.py`) on a free loopback port, stopped by
its own process id; and the `ffmpeg` program the FFmpeg source runs."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.server import free_port

SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with the GObject bindings (python3-gi)
CAMERA_SCRIPT = Path(__file__).with_name("rtsp_camera.py")
GSTREAMER = "gstreamer1.0-plugins-good gstreamer1.0-plugins-ugly gstreamer1.0-libav"
PACKAGES = f"ffmpeg python3-gi gir1.2-gst-rtsp-server-1.0 {GSTREAMER}"


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        raise RuntimeError(f"CI needs {what}: apt-get install {PACKAGES}")
    pytest.skip(f"{what} is not installed (apt-get install {PACKAGES})")


def require_ffmpeg() -> str:
    path = shutil.which("ffmpeg")
    if path is None:
        _missing("Debian's ffmpeg")
    return str(path)


def _has_rtsp_server() -> bool:
    check = "import gi; gi.require_version('GstRtspServer', '1.0'); from gi.repository import GstRtspServer"
    try:
        return subprocess.run([SYSTEM_PYTHON, "-c", check], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class RtspCamera:
    """The camera's process; `pause` and `resume` freeze it with its sockets open (a camera gone silent)."""

    def __init__(self, video: Path | list[Path], login: str = "") -> None:
        self.port = free_port()
        videos = ":".join(map(str, video if isinstance(video, list) else [video]))
        self.process = subprocess.Popen(
            [SYSTEM_PYTHON, str(CAMERA_SCRIPT), str(self.port), videos, "/cam", login],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()  # printed once it listens
        if not self.url.startswith("rtsp://"):
            self.stop()
            raise RuntimeError(f"the RTSP camera did not start: {self.url}")

    def pause(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextmanager
def rtsp_camera(video: Path | list[Path], login: str = "") -> Iterator[RtspCamera]:
    """The camera; with `login` ("user:password", the password as the camera knows it) it asks for them; with a list
    of videos, each new session plays the next (a camera whose settings changed)."""
    require_ffmpeg()
    if not _has_rtsp_server():
        _missing("GStreamer's RTSP server for Debian's python3")
    camera = RtspCamera(video, login)
    try:
        yield camera
    finally:
        camera.stop()
