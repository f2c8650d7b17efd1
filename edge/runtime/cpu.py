"""The service's CPU time per frame, from the kernel: the measure of efficiency that holds on a loaded machine.

Frames per second fall when other programs take the cores; CPU seconds per frame do not, so this is what tells an
operator whether a change of engine, threads or decoder made the service cheaper. It counts this process, its ended
children and its live ones (FFmpeg decoders), over the last half minute of frames.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from edge_inference.edge.detection.timings import process_cpu_seconds

WINDOW_S = 30.0


@dataclass(frozen=True)
class CpuFigures:
    cpu_seconds_total: float  # this process and its children, since the process started
    cpu_ms_per_frame: float | None  # over the last window; None before a frame
    cores_busy: float  # CPU seconds per second over the window: 1.0 is one core's worth
    window_s: float


class CpuPerFrame:
    """Samples (time, CPU, frames) when read, and gives CPU per frame over the last WINDOW_S."""

    def __init__(self, cpu: Callable[[], float] = process_cpu_seconds, clock: Callable[[], float] = time.monotonic):
        self._cpu, self._clock = cpu, clock
        self._lock = threading.Lock()
        self._start = (clock(), cpu(), 0)
        self._samples: collections.deque[tuple[float, float, int]] = collections.deque([self._start])

    def read(self, frames: int) -> CpuFigures:
        now, cpu = self._clock(), self._cpu()
        with self._lock:
            self._samples.append((now, cpu, frames))
            while len(self._samples) > 2 and now - self._samples[1][0] >= WINDOW_S:
                self._samples.popleft()  # keep the newest sample at least WINDOW_S old as the window's start
            then, cpu_then, frames_then = self._samples[0]
        elapsed = max(now - then, 1e-9)
        done = frames - frames_then
        per_frame = (cpu - cpu_then) * 1e3 / done if done > 0 else None
        return CpuFigures(
            cpu_seconds_total=round(cpu, 3),
            cpu_ms_per_frame=round(per_frame, 2) if per_frame is not None else None,
            cores_busy=round((cpu - cpu_then) / elapsed, 3),
            window_s=round(elapsed, 1),
        )
