"""Reading a source until stopped: reopen with backoff on failure, pace files at their fps, loop, hand frames on.

A read inside FFmpeg or a camera driver can block forever (a stream that keeps its socket open and sends nothing).
No thread can be interrupted there, so the watchdog abandons it: `CaptureRunner.check` notices a blocking call that
has lasted too long, stops listening to that loop, and starts a new one on a freshly made source. The old thread
closes its own source whenever the call returns.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

from edge_inference.edge.stream.sources import Frame, FrameSource, SourceError, SourceResized, describe_error

OPEN_GRACE_S = 0.2  # how long shutdown waits for an open in progress before leaving it
MAX_BACKOFF_S = 10.0
DEFAULT_STALL_S = 5.0
Outcome = Literal["failed", "resized", "ended", "stopped"]
SourceState = Literal["connecting", "running", "reconnecting", "ended"]
StateCallback = Callable[[SourceState, str | None], None]


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
            now = time.perf_counter()
            self.deliver(Frame(image, self.index, time.time(), now, (now - t0) * 1e3))
            self.index += 1
        return "stopped"

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
