"""Streams that run the same model file on the same engine and device share one loaded engine.

Four cameras on one model load it once (a quarter of the memory), take turns through one scheduler (fair, see
`scheduler.py`), and a Coral or Hailo is opened by one interpreter, as those devices are meant to be used. Each
stream keeps its own `Detector` (its pre-processing buffers, thresholds and decoder); only the `Backend` under
it is shared, through a `SharedBackend` that looks like any other backend.

A shared engine that hangs is left to its thread: the next stream that reloads gets a fresh one.
"""

from __future__ import annotations

import gc
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from edge_inference.backends import Backend, BackendOptions
from edge_inference.backends.isolation import open_engine
from edge_inference.backends.options import options_key
from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.memory import (
    MIB,
    RESERVE_BYTES,
    available_memory,
    lane_bytes,
    lane_fits,
    process_rss,
    settled_rss,
    shared_lanes_fitting,
)
from edge_inference.edge.detection.scheduler import InferenceScheduler
from edge_inference.edge.detection.threads import runs_on_cpu, usable_cores
from edge_inference.edge.detection.timings import percentile

log = logging.getLogger("edge.detectors")
Opener = Callable[[str, Path, BackendOptions], Backend]
MemoryReading = Callable[[], int | None]


@dataclass(frozen=True)
class EngineKey:
    engine: str
    path: str
    device: str
    threads: int | None
    allow_fallback: bool
    input_size: tuple[int, int] | None
    engine_options: str = "{}"  # streams with different engine options do not share an engine
    pixels: str = ""  # nor streams that ask the engine for different pre-processing
    isolation: str = "auto"  # nor one that wants it in a process of its own with one that does not

    @classmethod
    def of(cls, engine: str, path: Path, options: BackendOptions) -> EngineKey:
        return cls(
            engine,
            str(path.resolve()),
            options.device,
            options.threads,
            options.allow_fallback,
            options.input_size,
            options_key(options.engine_options),
            repr(options.pixels) if options.pixels else "",
            options.isolation,
        )


@dataclass
class SharedEngine:
    key: EngineKey
    backend: Backend
    scheduler: InferenceScheduler
    copies: list[Backend] = field(default_factory=list)  # further loads of the model, one per extra lane
    threads: int | None = None  # per lane, as loaded (more than the key's where lanes were held back for memory)
    loaded_at: float = field(default_factory=time.time)
    holders: dict[int, str] = field(default_factory=dict)  # id(SharedBackend) -> stream id
    retired: bool = False  # replaced after it hung; closed by nobody while its inference may still be running
    closed: bool = False

    @property
    def streams(self) -> list[str]:
        return sorted(set(self.holders.values()))


@dataclass
class SharedBackend(Backend):
    """A stream's handle on a shared engine: runs go through the engine's scheduler, close releases the handle."""

    shared: SharedEngine | None = None
    stream: str = ""
    pool: DetectorPool | None = None

    released: bool = False

    def run(self, tensor: np.ndarray) -> list[np.ndarray]:
        return self.run_timed(tensor)[0]

    @property
    def lanes(self) -> int:
        return 1 if self.shared is None else self.shared.scheduler.lanes

    def run_timed(self, tensor: np.ndarray) -> tuple[list[np.ndarray], float]:
        assert self.shared is not None and self.pool is not None
        try:
            return self.shared.scheduler.run(self.stream, tensor)
        finally:
            if self.released or self.shared.retired:  # a call outlived its handle: free the engine if unheld
                self.pool.close_if_abandoned(self.shared)

    def abandon(self, why: str) -> bool:
        """The engine under every stream on it is stuck: stopped where it can be; streams then load a new one."""
        return self.pool is not None and self.shared is not None and self.pool.abandon(self.shared, why)

    @property
    def alive(self) -> bool:
        return self.shared is None or _alive(self.shared)

    def close(self) -> None:
        if self.pool is not None and self.shared is not None and not self.released:
            self.released = True
            self.pool.release(self.shared, self)


class DetectorPool:
    def __init__(
        self,
        *,
        max_batch: int = 1,
        share: bool = True,
        opener: Opener = open_engine,
        memory: MemoryReading = available_memory,
    ) -> None:
        self.max_batch = max_batch
        self.share = share
        self._open = opener
        self._available = memory  # read before each lane beyond the first: what the memory left allows
        self._lock = threading.Lock()
        self._key_locks: dict[EngineKey, threading.Lock] = {}
        self._engines: dict[EngineKey, SharedEngine] = {}
        self._all: list[SharedEngine] = []  # every engine loaded, for statistics, until it is released

    def opener(self, stream: str, stuck_after_s: float, lanes: int = 1, threads_planned: bool = False) -> Opener:
        """What a stream's loader calls in place of `open_backend`. `threads_planned`: the threads per lane are the
        thread budget's, not the user's, so lanes held back for memory hand theirs to the lanes kept."""

        def open_shared(engine: str, path: Path, options: BackendOptions) -> Backend:
            return self.acquire(stream, engine, path, options, stuck_after_s, lanes, threads_planned)

        return open_shared

    def acquire(
        self,
        stream: str,
        engine: str,
        path: Path,
        options: BackendOptions,
        stuck_after_s: float = 10.0,
        lanes: int = 1,
        threads_planned: bool = False,
    ) -> SharedBackend:
        """A handle on the engine for this model, engine and device; loaded (with `lanes` lanes) on first use."""
        key = EngineKey.of(engine, path, options)
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # two streams starting together load the model once; other models load meanwhile
            shared = self._live_engine(key, stuck_after_s) if self.share else None
            if shared is None:
                shared = self._load(key, engine, path, options, lanes, threads_planned)
                with self._lock:
                    if self.share:
                        self._engines[key] = shared
                    self._all.append(shared)
            return self._handle(shared, stream)

    def _load(
        self, key: EngineKey, engine: str, path: Path, options: BackendOptions, lanes: int, threads_planned: bool
    ) -> SharedEngine:
        options = replace(options, lanes=max(1, lanes))
        before = settled_rss() if lanes > 1 else None  # what a first copy took, for further ones
        backend = self._open(engine, path, options)
        copies: list[Backend] = []
        shortage: _Shortage | None = None
        try:
            if backend.parallel == "copies" and lanes > 1:
                copies, shortage = self._copies(engine, path, options, lanes - 1, _grown(before))
            elif backend.parallel == "shared" and lanes > 1:
                shortage = self._shared_lanes(backend, lanes)
        except Exception:
            backend.close()
            raise
        if shortage is not None:
            # more lanes than cores were planned (LANES_PER_CORE): the lanes kept never get more threads than cores
            threads = min((options.threads or 1) * shortage.wanted // shortage.kept, max(usable_cores(), 1))
            rethread = threads_planned and options.threads is not None and threads > options.threads
            if rethread:
                options = replace(options, threads=threads, lanes=shortage.kept)
                loaded = [backend, *copies]
                del backend, copies  # the reload frees them first: memory is what is short
                backend, copies = self._reloaded(engine, path, options, loaded)
            _warn_short_of_memory(path, engine, options.threads, shortage, rethread)
        lanes = shortage.kept if shortage else max(1, lanes)
        lane_backends = [backend] * lanes if backend.parallel == "shared" else [backend, *copies]
        scheduler = InferenceScheduler(lane_backends, self.max_batch)
        return SharedEngine(key, backend, scheduler, copies=copies, threads=options.threads)

    def _reloaded(
        self, engine: str, path: Path, options: BackendOptions, opened: list[Backend]
    ) -> tuple[Backend, list[Backend]]:
        """The engine loaded again with `options.lanes` lanes of `options.threads`: the held-back lanes' threads
        shared among the lanes kept, so the cores the thread budget gave the engine stay in use (an engine's
        thread count is fixed when it loads). The old load is closed and freed first (the caller hands over its
        only references in `opened`): memory is what is short."""
        _close_each(opened)
        opened.clear()
        gc.collect()  # an engine's native memory goes with its last Python reference, cycles included
        backend = self._open(engine, path, options)
        copies: list[Backend] = []
        try:
            if backend.parallel == "copies":
                copies.extend(self._open(engine, path, options) for _ in range(options.lanes - 1))
        except Exception:
            _close_each([*copies, backend])
            raise
        return backend, copies

    def _shared_lanes(self, backend: Backend, wanted: int) -> _Shortage | None:
        """Whether one shared model may run `wanted` lanes at once: each holds an inference's working memory,
        reckoned at what the model's first inference added, while the memory left keeps the reserve. Two blank
        inferences first (the stream's warm-up then finds the engine warm): ONNX Runtime lays out its memory for
        a shape at the second run (+23 MiB on yolov8n int8 at 640), which the reading after them counts."""
        blank = _blank_input(backend)
        if blank is None or self._available() is None:
            return None
        before = settled_rss()
        if before is None:
            return None
        backend.run(blank)
        lane = _grown(before)
        backend.run(blank)
        available = self._available()
        fitting = shared_lanes_fitting(available, lane, wanted)
        return _Shortage(fitting, wanted, available, lane) if fitting < wanted else None

    def _copies(
        self, engine: str, path: Path, options: BackendOptions, wanted: int, loaded: int
    ) -> tuple[list[Backend], _Shortage | None]:
        """Up to `wanted` further loads of the model, each only while the memory left after it keeps the reserve.
        A copy is first reckoned at what the first load took (imports included: an overestimate), then at what the
        last copy took."""
        copies: list[Backend] = []
        try:
            while len(copies) < wanted:
                available = self._available()
                if not lane_fits(available, loaded):
                    return copies, _Shortage(len(copies) + 1, wanted + 1, available, lane_bytes(loaded))
                before = settled_rss()
                copies.append(self._open(engine, path, options))
                loaded = _grown(before) or loaded
        except Exception:
            _close_each(copies)
            raise
        return copies, None

    def _live_engine(self, key: EngineKey, stuck_after_s: float) -> SharedEngine | None:
        with self._lock:
            shared = self._engines.get(key)
            if shared is None:
                return None
            dead = not _alive(shared)
            if dead or shared.scheduler.busy_for() > stuck_after_s:
                what, name = "died" if dead else "hung", Path(key.path).name
                log.warning("%s on %s %s; its streams get a freshly loaded engine", name, key.device, what)
                shared.retired = True
                self._engines.pop(key)
            else:
                return shared
        self.close_if_abandoned(shared)
        return None

    def abandon(self, shared: SharedEngine, why: str) -> bool:
        """Retire an engine stuck in an inference; True where its process could be stopped (it is then killed, and
        every call waiting on it returns)."""
        killed = any([backend.abandon(why) for backend in [shared.backend, *shared.copies]])
        if killed:  # an engine in this process cannot be stopped: it stays, as a hung one always did
            with self._lock:
                shared.retired = True
                if self._engines.get(shared.key) is shared:
                    self._engines.pop(shared.key)
        return killed

    def _handle(self, shared: SharedEngine, stream: str) -> SharedBackend:
        inner = shared.backend
        described = {f.name: getattr(inner, f.name) for f in fields(Backend)}  # what the engine says of itself
        handle = SharedBackend(**described | {"notes": list(inner.notes)}, shared=shared, stream=stream, pool=self)
        with self._lock:
            shared.holders[id(handle)] = stream
            if len(shared.streams) > 1:
                log.info("%s on %s now serves %s", Path(shared.key.path).name, inner.device, ", ".join(shared.streams))
        return handle

    def release(self, shared: SharedEngine, handle: SharedBackend) -> None:
        with self._lock:
            shared.holders.pop(id(handle), None)
            if shared.holders:
                return
            if self._engines.get(shared.key) is shared:
                self._engines.pop(shared.key)
            if shared in self._all:
                self._all.remove(shared)
        self.close_if_abandoned(shared)

    def close_if_abandoned(self, shared: SharedEngine) -> None:
        """Close an engine nobody holds; a hung one only once its inference has returned (never under it)."""
        with self._lock:
            if shared.closed or shared.holders or shared.scheduler.busy_for() > 0:
                return
            shared.closed = True
        for backend in [shared.backend, *shared.copies]:
            backend.close()

    def engines(self) -> list[SharedEngine]:
        with self._lock:
            return list(self._all)


def lone_engine_threads(detector: Detector) -> int | None:
    """The CPU threads of the engine under `detector`, where it is a pool's, runs on the CPU and no other stream
    shares it; else None (an accelerator's engine has no threads to save, and loading it twice can fail)."""
    shared = getattr(detector.backend, "shared", None)
    if not runs_on_cpu(detector.backend) or not isinstance(shared, SharedEngine) or len(shared.streams) != 1:
        return None
    return shared.threads


def _alive(shared: SharedEngine) -> bool:
    """False once an engine's process has died (an engine in this process is alive while the process is)."""
    return all(getattr(backend, "alive", True) for backend in [shared.backend, *shared.copies])


def _blank_input(backend: Backend) -> np.ndarray | None:
    """A zero input of the model's shape (a dynamic batch as one), or None where its size is only known per frame."""
    tensor = backend.inputs[0] if backend.inputs else None
    if tensor is None or any(d <= 0 for d in tensor.shape[1:]):
        return None
    return np.zeros([max(tensor.shape[0], 1), *tensor.shape[1:]], dtype=tensor.dtype)


def _close_each(backends: list[Backend]) -> None:
    for backend in backends:
        backend.close()


def _grown(before: int | None) -> int:
    """Bytes the process's resident memory grew by since `before` (0 where it cannot be read, or it shrank)."""
    after = process_rss()
    return 0 if before is None or after is None else max(after - before, 0)


@dataclass(frozen=True)
class _Shortage:
    """Lanes held back for memory: `kept` of `wanted`, the memory left and what one more lane would take."""

    kept: int
    wanted: int
    available: int | None
    lane: int


def _warn_short_of_memory(path: Path, engine: str, threads: int | None, shortage: _Shortage, rethreaded: bool) -> None:
    todo = (
        "the lanes kept were given the others' threads"
        if rethreaded
        else "or give these streams threads: equal to the cores for one lane on every core"
    )
    log.warning(
        "%s on %s: %d of %d lanes loaded: %d MiB of memory left, and another lane would take about %d MiB "
        "(%d MiB are kept free). Its streams take turns on those, of %s thread(s) each: free memory or raise the "
        "container's limit for every lane; %s",
        path.name,
        engine,
        shortage.kept,
        shortage.wanted,
        (shortage.available or 0) // MIB,
        shortage.lane // MIB,
        RESERVE_BYTES // MIB,
        threads or "its default",
        todo,
    )


@dataclass(frozen=True)
class DetectorFigures:
    """Frigate-style detector statistics: speed, rate, wait for a turn, and which streams it serves."""

    model: str
    backend: str
    engine: str
    device: str
    threads: int | None  # per lane
    lanes: int  # inferences that may run at once
    streams: list[str]
    inference_ms_p50: float | None  # one engine run (a whole batch)
    queue_wait_ms_p50: float | None  # a frame's wait for its turn
    detection_fps: float  # frames inferred per second, all streams together
    frames: int
    inferences: int
    max_batch: int
    frames_per_stream: dict[str, int]
    waiting: int  # frames waiting for their turn now
    errors: int
    hung: bool  # replaced after an inference never returned
    # a model on a server: a request's round trip, network, the server's queue and compute (ms), and the batch size
    # the server ran, over its last few seconds (backends/triton_times.py); None for an engine that runs here
    server_ms: dict[str, float] | None = None


def _rounded(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 2)


def describe_engine(shared: SharedEngine, now: float | None = None) -> DetectorFigures:
    stats = shared.scheduler.stats
    with shared.scheduler.lock:
        inference, waits = list(stats.inference_ms), list(stats.queue_wait_ms)
        fps = stats.finished.rate(now or time.monotonic())
        per_stream = dict(sorted(stats.per_stream.items()))
    return DetectorFigures(
        model=Path(shared.key.path).name,
        backend=shared.backend.key,
        engine=shared.backend.engine,
        device=shared.backend.device,
        threads=shared.threads,
        lanes=shared.scheduler.lanes,
        streams=shared.streams,
        inference_ms_p50=_rounded(percentile(inference, 50)),
        queue_wait_ms_p50=_rounded(percentile(waits, 50)),
        detection_fps=round(fps, 2),
        frames=stats.frames,
        inferences=stats.batches,
        max_batch=shared.scheduler.max_batch,
        frames_per_stream=per_stream,
        waiting=shared.scheduler.waiting,
        errors=stats.errors,
        hung=shared.retired,
        server_ms=shared.backend.timing_split(),
    )
