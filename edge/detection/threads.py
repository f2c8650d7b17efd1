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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from edge_inference.backends.base import BackendError
from edge_inference.backends.engine import get_engine

if TYPE_CHECKING:
    from edge_inference.backends.base import Backend


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


# One-thread lanes per core of an engine's share, at most. A frame waiting for a lane costs a hand-off: its stream's
# thread must be woken and given a core before the lane runs again. Four files on one engine of 2 lanes (2 cores)
# ran 0.77x the fps of four separate engines at 1.02-1.05x the CPU per frame; with 4 lanes, 0.996x the CPU per
# frame (issue 62, BENCHMARKS.md). Each lane holds one more inference's working memory (+8 MiB for yolox-nano on
# ONNX Runtime; a LiteRT lane is a copy of the model), and the pool keeps only the lanes the memory holds.
LANES_PER_CORE = 2


def plan_engine(requests: int, engines: int, cores: int | None = None, threads: int | None = None) -> EnginePlan:
    """Threads and lanes of one of `engines` engines, serving `requests` frames that may wait for it at once (one
    per live stream; a file read as fast as the engine allows may have one in each lane).

    Side by side inferences on one thread each use a small CPU better than one inference on several threads
    (BENCHMARKS.md), so an engine gets a lane per frame that may wait, up to LANES_PER_CORE per core of its share,
    and the share's threads are divided among its lanes. A configured `threads` is kept, and lanes fill what is
    left.
    """
    share = engine_threads(engines, cores)
    if threads:
        return EnginePlan(threads, max(1, min(requests, share // threads)))
    lanes = max(1, min(requests, LANES_PER_CORE * share))
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


D = TypeVar("D")  # the stream's detector (detector.py imports this module: named by the caller, not imported)


@dataclass
class CameraThreads(Generic[D]):
    """A lone camera's engine threads, judged now and then by its stream with `camera_threads`. The service gives
    one to each live stream whose threads are the budget's; a stream with `threads:` keeps what it was given."""

    planned: Callable[[], int]  # the thread budget's threads for the stream's engine
    load: Callable[[int, int], D]  # (buffers, threads): the stream's detector on an engine of those threads
    engine_threads: Callable[[D], int | None]  # its engine's threads; None where other streams share it
    busy: bool = False  # a detector on other threads is wanted and loading (set by `wanted`, cleared by `changed`)
    next_look: float = 0.0  # monotonic; 0 before the first look
    judged: bool = False  # judged once it had settled: from then on (once not busy) it runs as decided

    def wanted(self, detector: D, inference_s: float | None, inferences: int, fps_in: float, now: float) -> int:
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


def threads_are_cpu(key: str) -> bool:
    """The engine declares its `threads` CPU threads (`Engine.cpu_threads`); an engine not installed does not."""
    try:
        return get_engine(key).cpu_threads
    except BackendError:
        return False


def runs_on_cpu(backend: Backend) -> bool:
    """The engine's threads are CPU threads: a CPU engine on the CPU, not a GPU, NPU or CUDA device behind it."""
    device = backend.device.upper()
    return "CPU" in device and not any(x in device for x in ("GPU", "NPU", "CUDA")) and threads_are_cpu(backend.key)


# A loop that runs frames back to back (`edge detect` over a video or a folder, a library user's loop) on one
# thread or on the budget's: on an idle 2-core machine two threads ran yolox-nano 1.26-1.7x as fast for 1.25x the
# CPU per frame; with anything else running, 0.5-0.9x as fast for twice the CPU (issue 62). So the loop measures
# both on its own frames, alternated in blocks so that a load that comes and goes weighs on both alike, and keeps
# more threads only where they finish frames clearly faster. Nothing spins (onnxruntime_backend.spinning).
LOOP_WARM_FRAMES = 3  # the first frames, on one thread and not timed: lazy initialisation
LOOP_BLOCK = 4  # frames on one setting before the other's turn
LOOP_TRIAL_FRAMES = 20  # timed on each setting per trial (a newly loaded engine's first two frames are not)
LOOP_PAYS = 1.15  # more threads are kept where they run at least this much more frames a second than one
LOOP_AGAIN_S = 60.0  # the machine's load changes: measured again this often


@dataclass(frozen=True)
class LoopTurn:
    engine: Backend
    threads: int
    timed: bool  # False where another call was on an engine meanwhile: its times are not the setting's alone


class LoopThreads:
    """A back-to-back loop's engine threads, measured on its own frames: one thread, or the budget's `planned`.
    `turn()` gives the engine for the next frame, `took()` takes the turn back with its wall and CPU seconds. Calls
    from several threads at once run on the engine in place, untimed; an engine is closed once no frame is on it.
    No lock is held while an engine loads or closes."""

    def __init__(
        self, first: Backend, planned: int, load: Callable[[int], Backend], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.threads, self.planned = 1, planned
        self.why = f"1 thread until {LOOP_TRIAL_FRAMES} frames were measured on 1 and on {_said(planned)}"
        self._load, self._clock = load, clock
        self._engines: dict[int, Backend] = {1: first}
        self._busy: dict[int, int] = {1: 0}
        self._times: dict[int, list[tuple[float, float]]] | None = None  # threads -> (wall, cpu) in this trial
        self._untimed: dict[int, int] = {}
        self._frames, self._turn, self._next_trial, self._loading = 0, 0, float("inf"), False
        self._chosen = False  # a trial ended, or the other engine could not be loaded
        self._lock = threading.Lock()

    def turn(self) -> LoopTurn:
        """The engine the next frame runs on."""
        with self._lock:
            self._frames += 1
            due = not self._loading and self._times is None and self._due()
            self._loading = self._loading or due
        if due:
            self._start_trial()
        with self._lock:
            alone = not any(self._busy.values())
            threads = self._whose_turn() if self._times is not None and alone else self.threads
            self._busy[threads] += 1
            return LoopTurn(self._engines[threads], threads, alone and self._times is not None)

    def took(self, turn: LoopTurn, wall_s: float, cpu_s: float) -> None:
        with self._lock:
            self._busy[turn.threads] -= 1
            if self._times is not None and turn.timed:
                self._count(turn.threads, wall_s, cpu_s)
            closing = []
            if self._times is None:  # chosen: the other engine goes once no frame is on it
                for threads in [t for t in self._engines if t != self.threads and not self._busy[t]]:
                    closing.append(self._engines.pop(threads))
                    del self._busy[threads]
        for engine in closing:
            engine.close()

    def close(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            engine.close()

    @property
    def loaded(self) -> list[int]:
        """The thread counts an engine is loaded on now: two during a trial, one otherwise."""
        with self._lock:
            return sorted(self._engines)

    @property
    def record(self) -> dict[str, object] | None:
        """What a loop's JSON record says of its engine threads, once they were chosen (or could not be)."""
        return {"threads": self.threads, "why": self.why} if self._chosen else None

    def _due(self) -> bool:
        return self._frames == LOOP_WARM_FRAMES + 1 or self._clock() >= self._next_trial

    def _start_trial(self) -> None:
        other = 1 if self.threads != 1 else self.planned
        try:
            engine: Backend | None = self._load(other)
        except Exception as exc:  # noqa: BLE001 - memory, an engine refusing a second copy: stay, and say why
            engine = None
            self.why = f"{_said(self.threads)}: {_said(other)} could not be loaded to compare ({exc})"
        with self._lock:
            self._loading = False
            if engine is None:
                self._next_trial, self._chosen = float("inf"), True
                return
            engine.notes[:] = list(self._engines[self.threads].notes)
            self._engines[other], self._busy[other] = engine, 0
            self._times, self._untimed, self._turn = {self.threads: [], other: []}, {other: 2}, 0

    def _whose_turn(self) -> int:
        assert self._times is not None
        order = list(self._times)  # the one in place first, then the newly loaded one
        wanted = order[(self._turn // LOOP_BLOCK) % 2]
        pending = [t for t in order if len(self._times[t]) < LOOP_TRIAL_FRAMES]
        return wanted if wanted in pending or not pending else pending[0]

    def _count(self, threads: int, wall_s: float, cpu_s: float) -> None:
        assert self._times is not None
        self._turn += 1
        if self._untimed.get(threads, 0) > 0:  # a newly loaded engine's first frame pays its lazy start
            self._untimed[threads] -= 1
            return
        self._times[threads].append((wall_s, cpu_s))
        if all(len(t) >= LOOP_TRIAL_FRAMES for t in self._times.values()):
            self._decide(self._times)

    def _decide(self, times: dict[int, list[tuple[float, float]]]) -> None:
        one, many = _rate(times[1]), _rate(times[self.planned])
        faster, costlier = many[0] / one[0], many[1] / one[1]
        self.threads = self.planned if faster >= LOOP_PAYS else 1
        self.why = (
            f"measured: {_said(self.planned)} ran {faster:.2f}x the frames a second of 1 thread at {costlier:.2f}x"
            f" the CPU per frame; {_said(self.threads)} kept (more only at {LOOP_PAYS}x the frames a second or more)"
        )
        self._times, self._next_trial, self._chosen = None, self._clock() + LOOP_AGAIN_S, True


def _rate(times: list[tuple[float, float]]) -> tuple[float, float]:
    """(frames a second, CPU seconds a frame) over a setting's timed frames."""
    wall, cpu = sum(t[0] for t in times), sum(t[1] for t in times)
    return len(times) / max(wall, 1e-9), cpu / len(times)


def _said(threads: int) -> str:
    return f"{threads} thread" + ("" if threads == 1 else "s")
