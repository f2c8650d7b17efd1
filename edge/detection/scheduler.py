"""One loaded engine serving several streams, fairly, as Frigate's detector process serves all its cameras.

Each stream's inference thread hands in its newest prepared frame and waits. Requests are served in the order
they arrived; a stream has at most one request waiting, so arrival order is round-robin by age and a busy camera
cannot starve a quiet one. There is no dispatcher thread: whichever waiting thread holds the oldest request runs
the engine (for itself and, when batching, for the requests queued behind it) and hands the others their outputs,
so a frame costs no extra thread hand-off; and only the threads that have something to do are woken.

An engine may have several lanes: inferences that run at once (one ONNX Runtime session or OpenVINO compiled
model called from several threads, or copies of a LiteRT interpreter). On a small CPU two one-thread inferences side
by side beat one two-thread inference (BENCHMARKS.md), so the thread budget gives a shared engine as many lanes as
it has streams, up to two one-thread lanes per core of its share (threads.py: LANES_PER_CORE). Batching
(`max_batch` > 1) takes what is already queued, never waits for more; it only applies where the model's batch
dimension is dynamic (`Backend.accepts_batch`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from edge_inference.backends import Backend
from edge_inference.edge.detection.timings import RateWindow

WINDOW = 300  # recent inferences kept for the percentiles


@dataclass
class _Request:
    stream: str
    tensor: np.ndarray
    queued: float  # monotonic
    wake: threading.Condition  # on the scheduler's lock: this request's thread alone is woken
    outputs: list[np.ndarray] | None = None
    error: BaseException | None = None
    done: bool = False
    run_ms: float = 0.0


@dataclass
class SchedulerStats:
    frames: int = 0
    batches: int = 0
    errors: int = 0
    per_stream: dict[str, int] = field(default_factory=dict)
    inference_ms: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))  # per engine run
    queue_wait_ms: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))  # per frame
    finished: RateWindow = field(default_factory=lambda: RateWindow(10.0))  # frames per second


class InferenceScheduler:
    def __init__(self, lanes: list[Backend], max_batch: int = 1) -> None:
        """`lanes`: backends that may run at once (the same thread-safe backend repeated, or copies)."""
        self.backend = lanes[0]
        self.lanes = len(lanes)
        self.max_batch = max(1, max_batch) if self.backend.accepts_batch else 1
        self.stats = SchedulerStats()
        self._lock = threading.Lock()
        self._queue: deque[_Request] = deque()
        self._free = list(lanes)
        self._running: dict[int, float] = {}  # id(batch) -> monotonic start, for inferences in progress

    def busy_for(self, now: float | None = None) -> float:
        """Seconds the oldest inference now running has taken (0 when idle): a stuck engine shows here."""
        with self._lock:
            started = min(self._running.values(), default=None)
        return 0.0 if started is None else (now or time.monotonic()) - started

    @property
    def lock(self) -> threading.Lock:
        """Held while reading `stats` from another thread."""
        return self._lock

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def run(self, stream: str, tensor: np.ndarray) -> tuple[list[np.ndarray], float]:
        """The outputs for one frame of `stream`, and the engine's own milliseconds (the wait for a turn excluded)."""
        request = _Request(stream, tensor, time.monotonic(), threading.Condition(self._lock))
        with self._lock:
            self._queue.append(request)
            while not request.done and not (self._free and self._queue[0] is request):
                request.wake.wait()
            batch, lane = ([], None) if request.done else self._take_batch()
        if lane is not None:
            self._run_batch(batch, lane)
        if request.error is not None:
            error, request.error = request.error, None
            try:
                raise error
            finally:
                del error  # this frame, in the error's traceback, keeps no reference back to it: no cycle to wait on
        assert request.outputs is not None
        return request.outputs, request.run_ms

    def _take_batch(self) -> tuple[list[_Request], Backend]:
        """Called with the lock held by the thread whose request is oldest, with a lane free: it runs this batch."""
        batch = [self._queue.popleft()]
        while self._queue and len(batch) < self.max_batch:
            batch.append(self._queue.popleft())
        self._running[id(batch)] = time.monotonic()
        lane = self._free.pop()
        if self._queue and self._free:
            self._queue[0].wake.notify()  # the next oldest takes another free lane
        return batch, lane

    def _run_batch(self, batch: list[_Request], lane: Backend) -> None:
        started = time.monotonic()
        t0 = time.perf_counter()
        error: BaseException | None = None
        results: list[list[np.ndarray]] = []
        try:
            results = lane.run_batch([r.tensor for r in batch])
        except BaseException as exc:  # noqa: BLE001 - handed to every waiting stream, each reports it
            error = exc
        run_ms = (time.perf_counter() - t0) * 1e3
        with self._lock:
            finished = time.monotonic()
            for index, request in enumerate(batch):
                request.error = error
                request.outputs = None if error else results[index]
                request.run_ms, request.done = run_ms, True
                self._count(request, started, finished, error is None)
            self.stats.batches += 1
            self.stats.inference_ms.append(run_ms)
            self._running.pop(id(batch), None)
            self._free.append(lane)
            # each thread of the batch has its outputs, the oldest waiting one the free lane; no one else wakes
            # (waking every stream's thread for each inference cost each of them a switch to find nothing to do)
            for request in batch:
                request.wake.notify()
            if self._queue:
                self._queue[0].wake.notify()
        del error, batch  # an error's traceback holds this frame: no cycle back to it and the requests' tensors

    def _count(self, request: _Request, started: float, finished: float, ok: bool) -> None:
        stats = self.stats
        stats.queue_wait_ms.append((started - request.queued) * 1e3)
        if not ok:
            stats.errors += 1
            return
        stats.frames += 1
        stats.per_stream[request.stream] = stats.per_stream.get(request.stream, 0) + 1
        stats.finished.add(finished)
