"""How many threads each loaded engine gets by default: the machine's usable cores, shared among the engines.

LiteRT runs one thread unless told otherwise, which leaves half of a 2-core machine (three quarters of a Pi's) idle;
every ONNX Runtime session takes all cores for itself, so four sessions oversubscribe them fourfold. One rule for
every engine: the usable cores (CPU affinity and a container's CPU quota count) divided among the engines loaded
at once, at least one each. Decoding, pre/post-processing and the service run while the engine waits on memory
and between frames; measured on 2 cores, giving the engine every core beat leaving one free (BENCHMARKS.md).
A stream's `threads:` (or `--threads`) still overrides this.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edge_inference.edge.detection.detector import Detector


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The container's CPU quota in cores (cgroup v2 `cpu.max`, e.g. docker --cpus 1.5), or None when unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return max(float(quota) / float(period), 0.0) or None
    except (ValueError, ZeroDivisionError):
        return None


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by a container's quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    if limit is not None:
        cores = min(cores, max(1, math.ceil(limit)))
    return max(1, cores)


def engine_threads(engines: int = 1, cores: int | None = None) -> int:
    """The default thread count of each of `engines` engines loaded at once."""
    cores = usable_cores() if cores is None else cores
    return max(1, cores // max(1, engines))


@dataclass(frozen=True)
class EnginePlan:
    threads: int  # engine threads of each lane
    lanes: int  # inferences of one shared engine that may run at once


def plan_engine(requests: int, engines: int, cores: int | None = None, threads: int | None = None) -> EnginePlan:
    """Threads and lanes of one of `engines` engines, serving `requests` frames that may wait for it at once (one
    per live stream; a file read as fast as the engine allows may have one in each lane).

    Side by side inferences on one thread each use a small CPU better than one inference on several threads
    (BENCHMARKS.md), so an engine gets a lane per frame that may wait, up to its share of the cores, and the share's
    threads are divided among its lanes. A configured `threads` is kept, and lanes fill what is left.
    """
    share = engine_threads(engines, cores)
    if threads:
        return EnginePlan(threads, max(1, min(requests, share // threads)))
    lanes = max(1, min(requests, share))
    return EnginePlan(max(1, share // lanes), lanes)


# A lone camera's engine on one thread, where one keeps up: at a camera's pace the engine waits between frames,
# and a second thread only shortens each inference, for 1.16x the CPU per frame (ONNX Runtime and OpenVINO on
# 2 cores, BENCHMARKS.md). One thread is taken where it would finish within 0.7 of the camera's frame interval even
# if the threads gave no speed-up at all (one thread then takes at most `threads` times as long): each detection is
# still out well before the next frame comes. Back to the plan's threads where one thread takes over 0.9 of it; as
# the first bound is a worst case, one thread measured after it cannot read over 0.9, so it does not flip back.
FITS_SHARE = 0.7
TOO_SLOW_SHARE = 0.9


def camera_threads(planned: int, threads: int, inference_s: float, interval_s: float) -> int:
    """The threads a lone camera's engine should run on, now on `threads` (the plan gave it `planned`), its median
    inference taking `inference_s` with frames `interval_s` apart."""
    if threads > 1 and threads * inference_s <= FITS_SHARE * interval_s:
        return 1
    if threads == 1 and planned > 1 and inference_s > TOO_SLOW_SHARE * interval_s:
        return planned
    return threads


SETTLED_INFERENCES = 16  # timed on the engine in place before its threads are judged
FIRST_LOOK_S = 10.0  # after the stream's start: the camera's rate is read over this long
LOOK_EVERY_S = 10.0  # the camera's rate or the machine's load may change: judged again this often
AFTER_CHANGE_S = 60.0  # and not sooner than this after a change, so a passing load does not flip it back and forth


@dataclass
class CameraThreads:
    """A lone camera's engine threads, judged now and then by its stream with `camera_threads`. The service gives
    one to each live stream whose threads are the budget's; a stream with `threads:` keeps what it was given."""

    planned: Callable[[], int]  # the thread budget's threads for the stream's engine
    load: Callable[[int, int], Detector]  # (buffers, threads): the stream's detector on an engine of those threads
    engine_threads: Callable[[Detector], int | None]  # its engine's threads; None where other streams share it
    busy: bool = False  # a detector on other threads is wanted and loading (set by `wanted`, cleared by `changed`)
    next_look: float = 0.0  # monotonic; 0 before the first look
    judged: bool = False  # judged once it had settled: from then on (once not busy) it runs as decided

    def wanted(self, detector: Detector, inference_s: float | None, inferences: int, fps_in: float, now: float) -> int:
        """The threads the stream's engine should move to, or 0 to leave it (not settled, shared, or right)."""
        if not self.next_look:
            self.next_look = now + FIRST_LOOK_S
        if self.busy or now < self.next_look or inference_s is None or inferences < SETTLED_INFERENCES:
            return 0
        self.next_look, self.judged = now + LOOK_EVERY_S, True
        threads = self.engine_threads(detector)
        if threads is None or fps_in <= 0:
            return 0
        wanted = camera_threads(self.planned(), threads, inference_s, 1.0 / fps_in)
        self.busy = wanted != threads  # with `judged`, at once: whoever waits for a settled engine sees both
        return wanted if self.busy else 0

    def changed(self, now: float, wait_s: float = 0.0) -> None:
        """A change was tried: the next look comes after AFTER_CHANGE_S, or `wait_s` where that is longer."""
        self.next_look = now + max(AFTER_CHANGE_S, wait_s)
        self.busy = False
