"""Reading a source until stopped: reopen with backoff on failure, pace files at their fps, loop, hand frames on.

A read inside FFmpeg or a camera driver can block forever (a stream that keeps its socket open and sends nothing).
No thread can be interrupted there, so the watchdog abandons it: `CaptureRunner.check` notices a blocking call that
has lasted too long, stops listening to that loop, and starts a new one on a freshly made source. The old thread
closes its own source whenever the call returns.

An RTSP camera read through OpenCV is also asked now and then the size of the frames it sends (`SizeWatch`).
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
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from edge_inference.edge.stream.sources import Frame, FrameSource, SourceError, SourceResized, describe_error

OPEN_GRACE_S = 0.2  # how long shutdown waits for an open in progress before leaving it
MAX_BACKOFF_S = 10.0
DEFAULT_STALL_S = 5.0
Outcome = Literal["failed", "resized", "ended", "stopped"]
SourceState = Literal["connecting", "running", "reconnecting", "ended"]
StateCallback = Callable[[SourceState, str | None], None]


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


def size_watch_for(source: FrameSource) -> SizeWatch | None:
    """A watch for an RTSP camera that OpenCV reads (`size_check_s` set), where ffprobe is installed."""
    interval = float(getattr(source, "size_check_s", 0.0))
    program = ffprobe_program() if interval and source.target.startswith(("rtsp://", "rtsps://")) else None
    return SizeWatch(source.target, interval, program) if program else None


def stall_timeout(configured: float | None, fps: float | None) -> float:
    """Seconds without a frame before a source is declared stalled: 5 s, or 10 frame intervals if slower."""
    if configured:
        return configured
    return max(DEFAULT_STALL_S, 10.0 / fps) if fps else DEFAULT_STALL_S


class CaptureLoop:
    def __init__(
        self,
        source: FrameSource,
        deliver: Callable[[Frame], None],
        *,
        stop: threading.Event,
        pace: bool,
        loop: bool,
        on_state: StateCallback,
        on_reconnect: Callable[[], None],
        on_end: Callable[[], None],
        first_index: int = 0,
    ) -> None:
        self.source = source
        self.deliver = deliver
        self.stop = stop
        self.pace, self.loop = pace, loop
        self.on_state, self.on_reconnect, self.on_end = on_state, on_reconnect, on_end
        self.index = first_index
        # When the blocking call in progress (open or read) began, for the watchdog; None between calls.
        self.busy_since: float | None = None
        self.busy_with = ""
        self.fps: float | None = None  # the source's own rate, read on this thread once it is open
        self.size_watch: SizeWatch | None = None  # an RTSP camera through OpenCV: its size asked of ffprobe

    def _begin(self, what: str) -> None:
        self.busy_with, self.busy_since = what, time.monotonic()

    def _end(self) -> None:
        self.busy_since = None

    def run(self) -> None:
        backoff = 0.5
        try:
            while not self.stop.is_set():
                try:
                    self._begin("open")
                    self.source.open()
                except SourceError as exc:
                    self._failed(describe_error(exc, self.source), dropped=False)
                    self.stop.wait(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF_S)
                    continue
                finally:
                    self._end()
                if self.stop.is_set():
                    break  # abandoned while opening: the new loop reports the state
                self.fps = self.source.fps
                self.size_watch = size_watch_for(self.source)
                self.on_state("running", None)
                backoff = 0.5
                outcome = self._read_frames()
                if outcome == "failed":
                    self.stop.wait(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF_S)
                elif outcome == "ended" and not self.loop:
                    self.on_end()
                    return
        finally:
            self.source.close()

    def _read_frames(self) -> Outcome:
        fps = self.fps if (self.pace and not self.source.live) else None
        started, first = time.perf_counter(), self.index
        while not self.stop.is_set():
            if fps:
                delay = started + (self.index - first) / fps - time.perf_counter()
                if delay > 0:
                    self.stop.wait(delay)
            t0 = time.perf_counter()
            try:
                self._begin("read")
                image = self.source.read()
            except SourceResized as exc:
                self._failed(str(exc), dropped=False)
                return "resized"
            except Exception as exc:  # noqa: BLE001 - any read failure (a decoder crash too) is a source failure
                if not self.stop.is_set():
                    self._failed(describe_error(exc, self.source))
                return "failed"
            finally:
                self._end()
            if self.stop.is_set():
                return "stopped"  # abandoned by the watchdog: this frame belongs to nobody
            if image is None:
                self.source.close()
                return "ended"
            if self.size_watch is not None and (message := self._resized(image.shape[1], image.shape[0])):
                self._failed(message, dropped=False)
                return "resized"
            now = time.perf_counter()
            self.deliver(Frame(image, self.index, time.time(), now, (now - t0) * 1e3))
            self.index += 1
        return "stopped"

    def _resized(self, width: int, height: int) -> str | None:
        assert self.size_watch is not None
        now = self.size_watch.check((width, height))
        if now is None:
            return None
        why = " (OpenCV would squeeze it into the old size)"
        return str(SourceResized.between(self.source.description, (width, height), now, why))

    def _failed(self, message: str, dropped: bool = True) -> None:
        """`dropped`: a source that was running went away (a reconnect, counted towards "unstable"); a source that
        cannot be opened at all (a camera switched off) is retried at the backoff's pace, and its own retries are no
        flapping."""
        if dropped:
            self.on_reconnect()
        self.source.close()
        self.on_state("reconnecting", message)


class CaptureRunner:
    """One source read on its own thread, relaunched on a fresh source when a call into it stalls."""

    def __init__(
        self,
        name: str,
        source: FrameSource,
        deliver: Callable[[Frame], None],
        *,
        pace: bool,
        loop: bool,
        on_state: StateCallback,
        on_reconnect: Callable[[], None],
        on_stall: Callable[[], None],
        on_end: Callable[[], None],
        stall_timeout_s: float | None = None,
    ) -> None:
        self.name = name
        self.deliver = deliver
        self.pace, self.loop = pace, loop
        self.on_state, self.on_reconnect, self.on_stall, self.on_end = on_state, on_reconnect, on_stall, on_end
        self.configured_stall_s = stall_timeout_s
        self.source = source
        self._loop: CaptureLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if not self._stopped:
                self._launch(first_index=0)

    def _launch(self, first_index: int) -> None:
        loop = CaptureLoop(
            self.source,
            self.deliver,
            stop=threading.Event(),
            pace=self.pace,
            loop=self.loop,
            on_state=self.on_state,
            on_reconnect=self.on_reconnect,
            on_end=self.on_end,
            first_index=first_index,
        )
        self._loop = loop
        self._thread = threading.Thread(target=loop.run, name=f"{self.name}-capture", daemon=True)
        self._thread.start()

    def begin_stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._loop is not None:
                self._loop.stop.set()

    def stop(self, timeout: float = 5.0) -> bool:
        """True once the reading thread has ended. A read stuck in a driver is left behind after `timeout`; an open
        still waiting on the network (FFmpeg's cannot be interrupted) after OPEN_GRACE_S: it closes its own source
        whenever it returns, and the process exits around it."""
        self.begin_stop()
        thread, loop = self._thread, self._loop
        if thread is None:
            return True
        if loop is not None and loop.busy_with == "open" and loop.busy_since is not None:
            timeout = min(timeout, OPEN_GRACE_S)
        thread.join(timeout)
        if thread.is_alive():
            self.source.interrupt()
        return not thread.is_alive()

    @property
    def alive(self) -> bool:
        thread = self._thread
        return self._stopped or (thread is not None and thread.is_alive())

    def check(self, now: float) -> str | None:
        """Called by the watchdog: abandon and relaunch a loop whose open or read has blocked too long."""
        loop = self._loop
        if loop is None or self._stopped:
            return None
        since = loop.busy_since
        # the source's fps as its own thread read it: a capture handle is not to be touched from this thread
        limit = stall_timeout(self.configured_stall_s, loop.fps) * (3 if loop.busy_with == "open" else 1)
        if since is None or now - since <= limit:
            return None
        message = f"stalled: no frame for {now - since:.1f} s (the {loop.busy_with} did not return); reopening"
        with self._lock:
            if self._stopped or self._loop is not loop:
                return None
            loop.stop.set()  # the stuck thread exits and closes its own source whenever its call returns
            self.source.interrupt()  # sooner, where the source can be interrupted (an FFmpeg child)
            self.on_stall()
            self.on_reconnect()
            self.on_state("reconnecting", message)
            self.source = self.source.fresh()  # the stuck thread keeps the old object until its call returns
            self._launch(first_index=loop.index)
        return message
