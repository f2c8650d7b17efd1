"""Helpers for the benchmark scripts: where the shared media are, frames, percentiles, the machine's description."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.machine import describe_machine
from edge_inference.edge.detection.timings import StageTimings, percentile, process_cpu_seconds
from edge_inference.edge.tools.bench import read_frames as bench_read_frames

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("EDGE_SHARED_DIR", REPO.parent / "shared")).resolve()
MODELS = SHARED / "models"
MEDIA = SHARED / "media"
VTEST = MEDIA / "vtest.avi"
# A registry name (`yolox-nano`) in any benchmark, and in the services they start, is read from the shared models,
# never downloaded: these machines reach no model host.
os.environ.setdefault("EDGE_MODEL_MIRROR", str(MODELS))


def read_frames(path: Path, count: int, step: int = 1) -> list[np.ndarray]:
    return bench_read_frames(str(path), count, step)


pct = percentile  # the benchmarks' short name for the one percentile helper


def machine() -> str:
    return describe_machine()


@contextlib.contextmanager
def busy_cores(count: int) -> Iterator[None]:
    """`count` programs each spinning on a core (as anything else on the machine would), stopped on leaving. They
    are a shell's children, not this process's: the kernel's CPU time of this process and its children (what the
    benchmarks count) leaves theirs out."""
    if count <= 0:
        yield
        return
    spin = f"{shlex.quote(sys.executable)} -c 'while True: pass' & " * count
    shell = subprocess.Popen(["sh", "-c", f"{spin} wait"], start_new_session=True)
    try:
        yield
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()


def cpu_by_role() -> dict[str, float]:
    """This process's CPU seconds so far (from the kernel, per thread) by what its threads do: a stream's threads are
    named `STREAM-ROLE` (`cam0-infer`, a second lane `cam0-infer1`, `cam0-capture`), so the role is the name's last
    part less a lane's number; any other thread is `other`."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    ticks = os.sysconf("SC_CLK_TCK")
    roles: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        name = names.get(int(task.name), "")
        role = name.rsplit("-", 1)[-1].rstrip("0123456789") if "-" in name else "other"  # `cam0-infer1`: infer
        roles[role] = roles.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return roles


def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM). Not `ru_maxrss`: that one keeps the high-water mark of the
    parent a child was forked from, so a child of a big benchmark process would report the parent's size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def stage_timings(detector: Detector, frames: list[np.ndarray], warm: int = 5) -> list[StageTimings]:
    """Each frame's own pre-processing, inference and decoding times, after `warm` untimed frames."""
    for frame in frames[:warm]:
        detector.detect(frame)
    return [detector.detect(frame).timings for frame in frames]


def overhead_ratio(timings: StageTimings) -> float:
    """(pre + inference + post) / inference of one frame."""
    return (timings.preprocess_ms + timings.inference_ms + timings.postprocess_ms) / timings.inference_ms


cpu_seconds = process_cpu_seconds  # the benchmarks' name: this process and its children, from the kernel
