"""Rolling per-stream figures: frame rates over a time window, stage latency percentiles over recent frames."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from edge_inference.edge.detection.timings import STAGES, FrameTiming, Percentiles, RateWindow, percentiles

FLAPPING_WINDOW_S = 60.0  # reconnections are counted over this window (a camera that flaps)


class QuietRepeats:
    """One warning said again and again (a camera switched off for the night fails its reopen every 10 s: 8640
    lines a day on a Pi's journal) is logged the first time, then with its count at growing intervals: after a
    minute, two, four ... at most an hour apart. A different warning, or `reset` when things work, starts over."""

    FIRST_S, MAX_S = 60.0, 3600.0

    def __init__(self) -> None:
        self._text: str | None = None
        self._count = 0  # said since it was last logged
        self._since = self._next = 0.0
        self._interval = self.FIRST_S

    def line(self, text: str, now: float) -> str | None:
        """The line to log for `text` at `now` (monotonic seconds), or None to stay quiet."""
        if text != self._text:
            self._text, self._count, self._since, self._interval = text, 0, now, self.FIRST_S
            self._next = now + self._interval
            return text
        self._count += 1
        if now < self._next:
            return None
        line = f"{text} (again, {self._count} times in {_duration(now - self._since)})"
        self._count, self._since = 0, now
        self._interval = min(2 * self._interval, self.MAX_S)
        self._next = now + self._interval
        return line

    def reset(self) -> None:
        self._text = None


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


@dataclass(frozen=True, slots=True)
class StreamFigures:
    """A stream's rates (per second, over the window) and counters, and stage latency percentiles over recent frames."""

    fps_in: float
    fps_processed: float
    fps_dropped: float
    frames_in: int
    frames_processed: int
    frames_dropped: int
    frames_still: int  # skipped by motion gating: nothing moved
    errors: int
    reconnects: int
    stalls: int
    restarts: int
    load_failures: int
    latency_ms: dict[str, Percentiles]  # by stage: capture, queue_wait, preprocess, inference, postprocess, end_to_end
    window_frames: int  # recent frames the percentiles cover
    inferences: int = 0  # model inputs run so far: a tiled frame counts each tile
    inferences_per_frame: float = 0.0  # over the recent frames: 1 for the whole frame, more for tiles or regions


class StreamStats:
    """Thread-safe: the pipeline's threads write, HTTP handlers read snapshots."""

    def __init__(self, window_s: float = 10.0, history: int = 600) -> None:
        self._lock = threading.Lock()
        self._in, self._processed, self._dropped = RateWindow(window_s), RateWindow(window_s), RateWindow(window_s)
        self._recent: deque[FrameTiming] = deque(maxlen=history)
        self.frames_in = self.frames_processed = self.frames_dropped = self.frames_still = 0
        self.inferences = 0
        self.errors = self.reconnects = 0
        self.stalls = self.restarts = self.load_failures = 0
        self._recent_reconnects = RateWindow(FLAPPING_WINDOW_S)

    def frame_in(self) -> None:
        with self._lock:
            self.frames_in += 1
            self._in.add(time.monotonic())

    def frame_dropped(self) -> None:
        with self._lock:
            self.frames_dropped += 1
            self._dropped.add(time.monotonic())

    def frame_still(self) -> None:
        """Motion gating skipped a frame: nothing moved."""
        with self._lock:
            self.frames_still += 1

    def frame_processed(self, timing: FrameTiming) -> None:
        with self._lock:
            self.frames_processed += 1
            self.inferences += timing.inferences
            self._processed.add(time.monotonic())
            self._recent.append(timing)

    def error(self) -> None:
        with self._lock:
            self.errors += 1

    def reconnect(self) -> None:
        with self._lock:
            self.reconnects += 1
            self._recent_reconnects.add(time.monotonic())

    def recent_reconnects(self) -> int:
        """Reconnections (reopens and stalls) in the last FLAPPING_WINDOW_S: a camera that flaps, each reopen
        succeeding."""
        with self._lock:
            return self._recent_reconnects.count(time.monotonic())

    def stall(self) -> None:
        with self._lock:
            self.stalls += 1

    def restart(self) -> None:
        """The detector was reloaded (stuck inference) or a crashed worker restarted."""
        with self._lock:
            self.restarts += 1

    def load_failure(self) -> None:
        with self._lock:
            self.load_failures += 1

    def fps_in(self) -> float:
        """Frames in a second from the source, over the window (a camera's own rate, before any gating)."""
        with self._lock:
            return self._in.rate(time.monotonic())

    def fps_processed(self) -> float:
        """The processed rate alone, without the percentile table `snapshot` builds."""
        with self._lock:
            return round(self._processed.rate(time.monotonic()), 2)

    def recent_timings(self, count: int) -> list[FrameTiming]:
        """The last `count` processed frames' timings, oldest first (as many as are kept)."""
        with self._lock:
            return list(self._recent)[-count:] if count > 0 else []

    def snapshot(self) -> StreamFigures:
        now = time.monotonic()
        with self._lock:
            recent = list(self._recent)
            rates = [round(window.rate(now), 2) for window in (self._in, self._processed, self._dropped)]
            frames = (self.frames_in, self.frames_processed, self.frames_dropped, self.frames_still)
            faults = (self.errors, self.reconnects, self.stalls, self.restarts, self.load_failures)
            inferences = self.inferences
        table = np.array([[getattr(t, f"{s}_ms") for s in STAGES] for t in recent], dtype=np.float64).reshape(
            -1, len(STAGES)
        )
        return StreamFigures(
            fps_in=rates[0],
            fps_processed=rates[1],
            fps_dropped=rates[2],
            frames_in=frames[0],
            frames_processed=frames[1],
            frames_dropped=frames[2],
            frames_still=frames[3],
            errors=faults[0],
            reconnects=faults[1],
            stalls=faults[2],
            restarts=faults[3],
            load_failures=faults[4],
            latency_ms={stage: percentiles(table[:, i]) for i, stage in enumerate(STAGES)},
            window_frames=len(recent),
            inferences=inferences,
            inferences_per_frame=round(sum(t.inferences for t in recent) / len(recent), 2) if recent else 0.0,
        )
