"""Where a frame's time went (the detector's three stages, a pipeline frame's whole path around them), the
rolling figures kept over them (percentiles and rates over a time window), and the process's CPU time from the
kernel (live children included), which `auto`, the service and the benchmarks divide by frames."""

from __future__ import annotations

import os
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

# a pipeline frame's stages, in the order they happen
STAGES = ("capture", "queue_wait", "preprocess", "inference", "postprocess", "tracking", "end_to_end")


@dataclass(frozen=True, slots=True)
class StageTimings:
    """One `Detector.detect`: pre-processing, inference, decoding; in ms."""

    preprocess_ms: float
    inference_ms: float
    postprocess_ms: float

    @property
    def total_ms(self) -> float:
        return self.preprocess_ms + self.inference_ms + self.postprocess_ms

    def to_dict(self) -> dict[str, float]:
        return {k.removesuffix("_ms"): round(v, 3) for k, v in asdict(self).items()}


@dataclass(frozen=True, slots=True)
class FrameTiming(StageTimings):
    """A frame through a pipeline: its detector stages plus reading it, waiting between threads, and the whole path."""

    captured_at: float  # wall clock, seconds since the epoch
    capture_ms: float
    queue_wait_ms: float  # all time spent waiting between stages
    end_to_end_ms: float  # from the frame being in hand to its result being published
    tracking_ms: float = 0.0  # tracker, zones and lines (0 when the stream does not track)
    inferences: int = 1  # model inputs the frame was run as: its tiles or regions, or the whole frame

    def to_dict(self) -> dict[str, float]:
        out = {"captured_at": round(self.captured_at, 6)}
        out.update({f"{stage}_ms": round(getattr(self, f"{stage}_ms"), 3) for stage in STAGES})
        return out


def percentile(values: list[float] | np.ndarray, q: float) -> float:
    """One percentile of a list of figures; NaN for none (a table shows it as missing, not as zero)."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else float("nan")


@dataclass(frozen=True, slots=True)
class Percentiles:
    p50: float
    p95: float
    p99: float


def percentiles(values: np.ndarray) -> Percentiles:
    if values.size == 0:
        return Percentiles(0.0, 0.0, 0.0)
    p50, p95, p99 = np.percentile(values, (50, 95, 99))
    return Percentiles(round(float(p50), 3), round(float(p95), 3), round(float(p99), 3))


class RateWindow:
    """Events per second over the last `window_s` seconds."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._times: deque[float] = deque()

    def add(self, now: float) -> None:
        self._times.append(now)
        self._trim(now)

    def count(self, now: float) -> int:
        """Events within the window."""
        self._trim(now)
        return len(self._times)

    def rate(self, now: float) -> float:
        self._trim(now)
        if len(self._times) < 2:
            return 0.0
        span = max(now - self._times[0], 1e-6)
        return len(self._times) / max(span, min(self.window_s, span))

    def _trim(self, now: float) -> None:
        while self._times and now - self._times[0] > self.window_s:
            self._times.popleft()


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


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
            total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14 and 15 of stat)
    return total


def process_cpu_seconds() -> float:
    """This process, its children that ended, and those still running."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system + _live_children_cpu()
