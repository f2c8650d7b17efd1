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
from dataclasses import dataclass
from pathlib import Path


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
