"""Reading a source until stopped: reopen with backoff on failure, pace files at their fps, loop, hand frames on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

from edge.sources import Frame, FrameSource, SourceError, describe_error

MAX_BACKOFF_S = 10.0
Outcome = Literal["failed", "ended", "stopped"]


class CaptureLoop:
    def __init__(
        self,
        source: FrameSource,
        deliver: Callable[[Frame], None],
        *,
        stop: threading.Event,
        pace: bool,
        loop: bool,
        on_state: Callable[[str, str | None], None],
        on_reconnect: Callable[[], None],
        on_end: Callable[[], None],
    ) -> None:
        self.source = source
        self.deliver = deliver
        self.stop = stop
        self.pace, self.loop = pace, loop
        self.on_state, self.on_reconnect, self.on_end = on_state, on_reconnect, on_end

    def run(self) -> None:
        backoff = 0.5
        index = 0
        while not self.stop.is_set():
            try:
                self.source.open()
            except SourceError as exc:
                self._failed(describe_error(exc, self.source))
                self.stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            self.on_state("running", None)
            backoff = 0.5
            outcome, index = self._read_frames(index)
            if outcome == "failed":
                self.stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
            elif outcome == "ended" and not self.loop:
                self.on_end()
                return
        self.source.close()

    def _read_frames(self, index: int) -> tuple[Outcome, int]:
        fps = self.source.fps if (self.pace and not self.source.live) else None
        started, first = time.perf_counter(), index
        while not self.stop.is_set():
            if fps:
                delay = started + (index - first) / fps - time.perf_counter()
                if delay > 0:
                    self.stop.wait(delay)
            t0 = time.perf_counter()
            try:
                image = self.source.read()
            except Exception as exc:  # noqa: BLE001 - any read failure (a decoder crash too) is a source failure
                self._failed(describe_error(exc, self.source))
                return "failed", index
            if image is None:
                self.source.close()
                return "ended", index
            now = time.perf_counter()
            self.deliver(Frame(image, index, time.time(), now, (now - t0) * 1e3))
            index += 1
        return "stopped", index

    def _failed(self, message: str) -> None:
        self.on_reconnect()
        self.source.close()
        self.on_state("reconnecting", message)
