"""Whether an RTSP camera read through OpenCV still sends frames of the size it was opened at.

OpenCV's FFmpeg capture keeps the size it opened a stream at: a camera whose resolution is changed while it streams
(in its web page, or by its own day/night profile) has every later frame squeezed into the old size, 16:9 into 4:3,
and no property or callback of OpenCV's changes with it (cap_ffmpeg_impl.hpp compares the frame with the stream's
parameters from the open, which are never updated). So the stream is asked from outside, now and then: `ffprobe`
opens a session of its own and reads the size the camera sends now (about a second of network and decoding, every
`interval_s`, on a thread of its own). A size that differs from the frames' is a change: the source is reopened.
The ffmpeg source (`ffmpeg:` on a stream) sees the change in FFmpeg's own log instead and needs none of this.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

PROBE_TIMEOUT_S = 20.0


def ffprobe_program() -> str | None:
    """ffprobe beside the ffmpeg program EDGE_FFMPEG names, or on the PATH."""
    ffmpeg = os.environ.get("EDGE_FFMPEG")
    if ffmpeg:
        beside = Path(ffmpeg).with_name("ffprobe")
        if beside.exists():
            return str(beside)
    return shutil.which("ffprobe")


def probed_size(program: str, target: str, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[int, int] | None:
    """The width and height of the stream's video now, as ffprobe reads them from a session of its own."""
    transport = ["-rtsp_transport", "tcp"] if target.lower().startswith(("rtsp://", "rtsps://")) else []
    command = [program, "-v", "error", *transport, "-select_streams", "v:0"]
    command += ["-show_entries", "stream=width,height", "-of", "csv=p=0", target]
    try:
        answer = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    fields = answer.stdout.strip().split(",")
    if answer.returncode != 0 or len(fields) != 2 or not all(f.isdigit() for f in fields):
        return None
    return int(fields[0]), int(fields[1])


class SizeWatch:
    """Asks ffprobe every `interval_s` on a thread of its own; `check` (the capture thread's, per frame) is cheap."""

    def __init__(self, target: str, interval_s: float, program: str) -> None:
        self.target, self.interval_s, self.program = target, interval_s, program
        self._due = time.monotonic() + interval_s
        self._thread: threading.Thread | None = None
        self._answer: tuple[int, int] | None = None

    def check(self, size: tuple[int, int]) -> tuple[int, int] | None:
        """The size the camera sends now where it differs from `size` (the frames'); None otherwise."""
        now = time.monotonic()
        if now >= self._due and (self._thread is None or not self._thread.is_alive()):
            self._due = now + self.interval_s
            self._thread = threading.Thread(target=self._probe, name="size-probe", daemon=True)
            self._thread.start()
        answer, self._answer = self._answer, None
        return answer if answer is not None and answer != size else None

    def _probe(self) -> None:
        self._answer = probed_size(self.program, self.target)
