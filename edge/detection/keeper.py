"""Keeps one stream's detector working: loads it with backoff until it works, and gives up on one that is stuck.

A stream may run several inferences at once (a file read as fast as the engine allows, on an engine with lanes):
each is watched, and a detector given up on is closed when the last inference still holding it returns.

The stream's threads only ask for the current detector and run inferences through `infer`; whether a model is
loading, failed (and is retried, so a replugged accelerator comes back) or stuck in an inference (accelerator
unplugged or hung: replaced, the stuck one left to its thread, which frees it when its call returns) is this
object's business, and it reports each change of state through `on_state`.
"""

from __future__ import annotations

import itertools
import logging
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np

from edge_inference.backends.base import BackendRefused
from edge_inference.backends.isolated import EngineCrashed
from edge_inference.edge.detection.detector import Detector

log = logging.getLogger("edge.detectors")
DetectorState = Literal["loading", "failed", "ready"]
FIRST_LOAD_BACKOFF_S = 1.0
MAX_LOAD_BACKOFF_S = 60.0
STUCK_MULTIPLE = 10  # an inference this many times slower than usual on this device is stuck
CRASH_WINDOW_S = 60.0  # engine deaths this close together back its restarts off
# An engine in a process of its own whose inferences keep failing is started anew: a device error that sticks to the
# process (a CUDA context after an illegal address, a driver handle gone bad) ends with it
FAILURES_BEFORE_RESTART = 5
# Inferences failing this many times in a row put the stream in `failed` with the engine's line (a server away, a
# device gone): health degraded, said within a second or two; the next inference that works makes it ready again
FAILURES_TO_SAY = 2
MAX_RESTART_WAIT_S = 30.0


def _ignore(*_: object) -> None:
    return None


class DetectorKeeper:
    """`generation` names the detector in place: it changes whenever the keeper gives up on one, so a thread that
    holds an older detector knows to stop using it."""

    def __init__(
        self,
        load: Callable[[], Detector],
        stop: threading.Event,
        *,
        inference_timeout_s: float = 10.0,
        on_state: Callable[[DetectorState, str | None], None] = _ignore,
        on_load_failure: Callable[[], None] = _ignore,
        on_replaced: Callable[[], None] = _ignore,
        first_backoff_s: float = FIRST_LOAD_BACKOFF_S,
    ) -> None:
        self._load = load
        self._stop = stop
        self.inference_timeout_s = inference_timeout_s
        self._on_state = on_state
        self._on_load_failure = on_load_failure
        self._on_replaced = on_replaced
        self._first_backoff_s = first_backoff_s
        self._lock = threading.Lock()
        self.detector: Detector | None = None
        self.state: DetectorState = "loading"
        self.generation = 0
        self._started: dict[int, float] = {}  # token -> monotonic start, for each inference in progress
        self._held: dict[int, int] = {}  # generation -> inferences in progress on that generation's detector
        self._tokens = itertools.count()
        # what an inference takes on this device (the warm-up's, then recent ones): on a slow device (a Pi Zero, a
        # large model, emulation) a fixed limit would call every inference stuck and reload forever
        self._recent_s: deque[float] = deque(maxlen=32)
        self._deaths: deque[float] = deque(maxlen=8)  # when the engine's process died under this stream
        self._restart_due = False  # an engine died: the watchdog's next check has it loaded again
        self._failed_in_row = 0
        self._said_failing = False  # FAILURES_TO_SAY reached: the state says so until an inference works

    def current(self) -> tuple[int, Detector | None]:
        with self._lock:
            return self.generation, self.detector

    def is_current(self, generation: int) -> bool:
        return generation == self.generation

    @property
    def inferring(self) -> bool:
        return bool(self._started)

    @property
    def normal_s(self) -> float | None:
        """The median time of recent inferences (the warm-up's until there are some), or None before any."""
        return statistics.median(self._recent_s) if self._recent_s else None

    @property
    def stuck_after_s(self) -> float:
        """An inference is stuck past the configured limit, or past STUCK_MULTIPLE normal ones, whichever is later."""
        normal = self.normal_s
        return max(self.inference_timeout_s, STUCK_MULTIPLE * normal) if normal else self.inference_timeout_s

    # -- loading -----------------------------------------------------------------------------------------------
    def load(self) -> bool:
        """Load and warm up, retrying with backoff; True once a detector is in place, False if the stream stopped.
        After engines died one after another, wait first: one that dies at every start must not spin."""
        wait = self.restart_wait_s()
        if wait and self._stop.wait(wait):
            return False
        detector = self._load_with_retry()
        if detector is None:
            return False
        with self._lock:
            self.detector = detector
            self._said_failing = False
            self._set_state("ready", None)
        return True

    def _load_with_retry(self) -> Detector | None:
        backoff = self._first_backoff_s
        while not self._stop.is_set():
            detector = None
            try:
                detector = self._load()
                started = time.monotonic()
                detector.warmup()
                warm_s = time.monotonic() - started
            except Exception as exc:  # noqa: BLE001 - any loading failure is reported and retried
                if detector is not None:
                    detector.close()
                self._on_load_failure()
                # A refusal (a runtime pair known to crash) stands until the installation changes: looked at again
                # at the longest backoff, never as a quick retry that would read as a crash loop
                wait = MAX_LOAD_BACKOFF_S if isinstance(exc, BackendRefused) else backoff
                again = "looked at again" if isinstance(exc, BackendRefused) else "retrying"
                with self._lock:
                    self._set_state("failed", f"cannot load the model: {exc} ({again} in {wait:g} s)")
                self._stop.wait(wait)
                backoff = min(backoff * 2, MAX_LOAD_BACKOFF_S)
                continue
            if self._stop.is_set():
                detector.close()
                return None
            self._recent_s.clear()
            self._recent_s.append(warm_s)
            return detector
        return None

    def restart_wait_s(self, now: float | None = None) -> float:
        """0 after one engine death; then 1, 2, 4 ... 30 s while they keep coming within a minute of each other."""
        now = time.monotonic() if now is None else now
        recent = [t for t in self._deaths if now - t < CRASH_WINDOW_S]
        return 0.0 if len(recent) <= 1 else min(2.0 ** (len(recent) - 2), MAX_RESTART_WAIT_S)

    # -- inference ---------------------------------------------------------------------------------------------
    def infer(self, generation: int, detector: Detector, tensor: np.ndarray) -> tuple[list[np.ndarray], float] | None:
        """One inference on `detector`, watched for getting stuck: its outputs and time in ms, or None when the
        keeper gave up on this detector while it ran (then it is closed here, and the caller's loop must end).
        Raises what the engine raised."""
        with self._lock:
            if generation != self.generation:
                return None  # given up on or replaced after its frame was taken: the new detector takes the next
            token, started = next(self._tokens), time.monotonic()
            self._started[token] = started
            self._held[generation] = self._held.get(generation, 0) + 1
        error: Exception | None = None
        outcome: tuple[list[np.ndarray], float] | None = None
        try:
            outcome = detector.infer_timed(tensor)
        except EngineCrashed as exc:
            self._engine_died(generation, exc)
            error = exc
        except Exception as exc:  # noqa: BLE001 - handed to the caller once the stuck-inference bookkeeping is done
            error = exc
        took = time.monotonic() - started
        with self._lock:
            still_current = generation == self.generation
            self._started.pop(token, None)
            self._held[generation] -= 1
            last = self._held[generation] == 0
            if last:
                del self._held[generation]
            if still_current and error is None:
                self._recent_s.append(took)
        if not still_current:
            if last:
                detector.close()  # given up on while it ran, and no other inference holds it any more
            return None
        if error is not None:
            self._failing(detector, error)
            try:
                raise error
            finally:
                del error  # no cycle through this frame: it would hold the frame's tensors until the GC ran
        self._failed_in_row = 0
        if self._said_failing:
            with self._lock:
                if self._said_failing and generation == self.generation:
                    self._said_failing = False
                    self._set_state("ready", None)
        return outcome

    def _failing(self, detector: Detector, error: Exception) -> None:
        """Counts failed inferences in a row on the detector in place; at FAILURES_BEFORE_RESTART an isolated engine's
        process is ended, and the next inference finds it dead (`_engine_died`): started again, with the deaths'
        backoff."""
        self._failed_in_row += 1
        if self._failed_in_row >= FAILURES_TO_SAY and not self._said_failing:
            with self._lock:
                if self.state == "ready":
                    self._said_failing = True
                    self._set_state("failed", f"inferences failing: {error}")
        if self._failed_in_row >= FAILURES_BEFORE_RESTART:
            self._failed_in_row = 0
            detector.backend.abandon(f"{FAILURES_BEFORE_RESTART} inferences in a row failed ({error})")

    def _engine_died(self, generation: int, exc: EngineCrashed) -> None:
        """The engine's process is gone: the stream says so now, its frames in flight are dropped (`infer` returns
        None to each), and the watchdog's next check loads it again."""
        with self._lock:
            if generation != self.generation:
                return  # said already, by the first inference that found it dead
            self._retire()
            self._deaths.append(time.monotonic())
            self._restart_due = True
            wait = self.restart_wait_s()
            when = f"in {wait:g} s" if wait else "now"
            self._set_state("failed", f"{exc}; starting it again {when}")
        log.warning("%s", exc)
        self._on_replaced()

    def check(self) -> bool:
        """The watchdog's call: True when an inference has outlived the timeout and the keeper gave up on its
        detector (state `loading`), when its engine's process died, or when `--backend auto` measured another engine
        faster than the one it started on; the caller then runs `load` on a thread of its own to put a new one in
        place."""
        with self._lock:
            if self._restart_due:
                self._restart_due = False
                return True
        if self._superseded():
            return True
        limit = self.stuck_after_s
        with self._lock:
            started = min(self._started.values(), default=None)
            if started is None or time.monotonic() - started <= limit:
                return False
            stuck = self.detector
            self._retire()
            self._on_replaced()
            normal = self.normal_s
            learned = normal is not None and limit > self.inference_timeout_s
            usual = f", {STUCK_MULTIPLE}x the {normal:.2g} s one takes here" if learned else ""
        # outside the lock: an engine in a process of its own is killed, and its stuck call returns
        killed = stuck is not None and stuck.backend.abandon(f"hung {limit:g} s")
        if killed and stuck is not None:
            self._deaths.append(time.monotonic())  # a hang that comes back at every start backs off too
            backend = stuck.backend
            engine = f"the {backend.key} engine ({Path(backend.model_path).name} on {backend.device})"
            message = f"{engine} hung: no answer in {limit:g} s{usual}; its process was killed, loading it again"
        else:
            message = (
                f"inference did not return within {limit:g} s{usual}: the detector is stuck "
                "(accelerator unplugged or hung?); reloading it"
            )
        with self._lock:
            self._set_state("loading", message)
        if killed:
            log.warning("%s", message)
        return True

    def _superseded(self) -> bool:
        with self._lock:
            detector = self.detector
            faster = detector.superseded() if detector is not None else None
            if detector is None or not faster:
                return False
            busy = self.generation in self._held
            self._retire()
            self._set_state("loading", None)
        log.info("--backend auto measured %s faster than %s: loading it", faster, detector.backend.key)
        if not busy:  # an inference in progress closes it itself when it returns (`infer`)
            detector.close()
        return True

    def replace(self, detector: Detector) -> bool:
        """Put `detector`, loaded and warmed up beside the one in place (the same model on other threads), in its
        place without a pause: the old one is closed once no inference holds it. False, and `detector` closed,
        when there is no detector in place to replace (given up on meanwhile, or stopping)."""
        with self._lock:
            old, busy = self.detector, self.generation in self._held
            replaced = old is not None and not self._stop.is_set()
            if replaced:
                self._retire()
                self.detector = detector
                self._recent_s.clear()
        if old is None or not replaced:
            detector.close()
            return False
        if not busy:  # an inference in progress closes it itself when it returns (`infer`)
            old.close()
        return True

    @property
    def recent_inferences(self) -> int:
        """Inferences timed on the detector in place (the warm-up's included), up to 32."""
        return len(self._recent_s)

    def release(self) -> None:
        """At stop: close the detector, unless an inference still holds it (its thread closes it when it returns)."""
        with self._lock:
            detector, busy = self.detector, self.generation in self._held
            self._retire()
        if detector is not None and not busy:
            detector.close()

    def _retire(self) -> None:
        """Call with the lock held: no detector in place, and whoever holds the last one stops using it."""
        self.generation += 1
        self._started.clear()  # those still running hold a retired detector: no longer watched
        self.detector = None

    def _set_state(self, state: DetectorState, error: str | None) -> None:
        self.state = state
        self._on_state(state, error)
