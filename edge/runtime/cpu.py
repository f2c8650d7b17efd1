"""The service's CPU time per frame, from the kernel: the measure of efficiency that holds on a loaded machine.

Frames per second fall when other programs take the cores; CPU seconds per frame do not, so this is what tells an
operator whether a change of engine, threads or decoder made the service cheaper. It counts this process, its ended
children and its live ones (FFmpeg decoders), over the last half minute of frames.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

WINDOW_S = 30.0
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _live_children_cpu(proc: Path = Path("/proc")) -> float:
    """CPU seconds of this process's running children (Linux: /proc/self/task/*/children)."""
    total = 0.0
    try:
        tasks = list((proc / "self" / "task").iterdir())
    except OSError:
        return 0.0
    for task in tasks:
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in children:
            try:
                fields = (proc / pid / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # ended meanwhile: it is in the children's count once waited for
            total += (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15 of stat)
    return total


def process_cpu_seconds() -> float:
    """This process, its children that ended, and those still running."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system + _live_children_cpu()


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
