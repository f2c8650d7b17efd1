"""One stream: capture -> inference -> decoding on three threads, results fanned out to subscribers.

How frames reach the inference thread is the delivery strategy's business (`delivery.py`): live sources keep only
the newest frame, files deliver every frame in order. A file may have several frames in inference at once, one per
lane of its engine (two one-thread inferences side by side use a small CPU better than one on two threads); every
frame taken gets a number, and results are published in that order.

Nothing here gives up: the stream's `DetectorKeeper` (edge/detection/keeper.py) keeps a working detector (a model
that fails to load is retried with backoff, an inference that never returns gets the detector reloaded), a stalled
source is reopened (see `check`, called by the watchdog), and a worker that crashes on a bug is restarted. The
state and its errors say what is going on.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal, cast

import numpy as np

from edge_inference.edge.detection.detector import Detector, Prepared
from edge_inference.edge.detection.keeper import DetectorKeeper, DetectorState
from edge_inference.edge.detection.threads import CameraThreads
from edge_inference.edge.detection.timings import FrameTiming
from edge_inference.edge.stream.capture import CaptureRunner, SourceState
from edge_inference.edge.stream.delivery import END, Delivered, Mode, delivery_for
from edge_inference.edge.stream.motion import Box, MotionGate
from edge_inference.edge.stream.publish import Broadcaster
from edge_inference.edge.stream.sources import Frame, FrameSource
from edge_inference.edge.stream.stats import FLAPPING_WINDOW_S, QuietRepeats, StreamStats
from edge_inference.edge.stream.tracking import LineState, StreamTracker, ZoneState
from edge_inference.models.detection import Detection
from edge_inference.models.regions import MotionRegions, unseen_since

log = logging.getLogger("edge.pipeline")

# loading: the model is loading; failed: it failed to load and is retried; the others are the source's.
# A camera that delivers a few seconds and stalls, again and again, reads "running" most of the time: this many
# reconnections within the window make it degraded while it flaps.
FLAPPING_RECONNECTS = 3
State = Literal["loading", "failed", "connecting", "running", "reconnecting", "ended", "stopped"]
RETHREAD_FAILED_WAIT_S = 3600.0  # an engine that could not load on other threads is not tried again for so long
SKIP = object()  # a frame taken that yields no result (its inference failed, or its detector was given up on)


@dataclass(frozen=True)
class FrameResult:
    stream_id: str
    index: int
    width: int
    height: int
    detections: list[Detection]
    timing: FrameTiming
    image: np.ndarray = field(repr=False)  # the frame as captured; wire encodings of it live in service/
    zones: tuple[ZoneState, ...] = ()  # when the stream tracks: who is in each zone now
    lines: tuple[LineState, ...] = ()  # and the crossings of each line
    # time.perf_counter() when the frame was in hand: ages and durations, which the wall clock's jumps (NTP setting
    # a Pi's clock after boot: it has no clock of its own) must not move; 0: not known, the wall clock is used
    captured_mono: float = 0.0
    held_tracks: frozenset[int] = frozenset()  # track ids the tracker still keeps, lost ones included
    regions: tuple[tuple[int, int, int, int], ...] = ()  # x1 y1 x2 y2 of the tiles or regions run; (): the whole

    @property
    def age_s(self) -> float:
        if self.captured_mono:
            return max(0.0, time.perf_counter() - self.captured_mono)
        return max(0.0, time.time() - self.timing.captured_at)


@dataclass(frozen=True)
class StreamNames:
    """What the stream was configured with: shown (and used as metric labels) before the detector has loaded."""

    model: str
    backend: str
    source: str


@dataclass(frozen=True)
class Health:
    """What a person (or a probe) needs to know about one stream right now."""

    state: State
    since: float  # wall clock, seconds since the epoch
    error: str | None  # what is wrong now; None while frames flow
    last_error: str | None  # the most recent error, kept after recovery
    last_error_at: float | None
    frame_age_s: float | None  # age of the newest processed frame
    detector_restarts: int
    stalls: int
    workers_alive: bool
    # a source that keeps dropping and coming back ("unstable: 6 reconnects in 60 s"); None when steady
    unstable: str | None = None


class StreamPipeline:
    def __init__(
        self,
        stream_id: str,
        source: FrameSource | None,
        load_detector: Callable[[int], Detector],
        *,
        mode: Mode | None = None,
        pace: bool = True,
        loop: bool = False,
        names: StreamNames | None = None,
        stall_timeout_s: float | None = None,
        inference_timeout_s: float = 10.0,
        tracker: StreamTracker | None = None,
        motion: MotionGate | None = None,
        regions: MotionRegions | None = None,
        lanes: int = 1,
        camera_threads: CameraThreads[Detector] | None = None,
    ) -> None:
        """`lanes`: frames of a file that may be in inference at once, up to the lanes its engine has.
        `camera_threads`: a live stream's engine moved to one thread where one keeps up with the camera."""
        self.stream_id = stream_id
        self.camera_threads = camera_threads
        self.tracker = tracker
        self.motion = motion
        self.regions = regions  # motion regions: where the detector looks on each frame the gate lets through
        self._still_at: float | None = None  # the stream clock of the last frame the motion gate skipped
        self._stop = threading.Event()
        mode = mode or ("live" if source is None or source.live else "file")
        self.lanes = max(1, lanes) if mode == "file" else 1  # live: the newest frame, one at a time
        self.delivery = delivery_for(mode, self._stop, pace=pace, lanes=self.lanes)
        self.names = names or StreamNames("", "", "" if source is None else source.description)
        self.stats = StreamStats()
        self.keeper = DetectorKeeper(
            lambda: load_detector(self.delivery.buffers),
            self._stop,
            inference_timeout_s=inference_timeout_s,
            on_state=self._set_detector_state,
            on_load_failure=self.stats.load_failure,
            on_replaced=self.stats.restart,
        )
        self.results: Broadcaster[FrameResult] = Broadcaster()
        self.latest: FrameResult | None = None
        # (frame index, detections) of recent results, for agreement between pipelines fed the same frames
        self.recent: deque[tuple[int, list[Detection]]] = deque(maxlen=300)
        self._listeners: list[Callable[[FrameResult], None]] = []
        # frames between their take and their publication: numbered at the take, published in that order
        self._window = threading.Semaphore(self.lanes + 2)
        self._take_lock = threading.Lock()
        self._taken = 0  # the number the next frame taken gets
        self._next = 0  # the number of the next frame to publish
        self._in_flight: dict[int, int] = {}  # number -> generation of the detector it was taken for
        self._pending: dict[int, object] = {}  # results that arrived before an earlier frame's
        self._inferred: queue.Queue[tuple[int, object]] = queue.Queue()  # bounded by the window
        self._threads: list[threading.Thread] = []
        self._lock = threading.RLock()
        # state: the detector's part (the keeper's: loading/failed/ready) and the source's, combined by `state`
        self._source_state: SourceState = "connecting"
        self._stopped = False
        self.state_since = time.time()
        self._shown_state: State = "loading"
        self.error: str | None = None
        self._repeats = QuietRepeats()  # the same error again (a camera off for the night): logged less and less often
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.capture: CaptureRunner | None = None
        if source is not None:
            self.capture = CaptureRunner(
                stream_id,
                source,
                self.offer,
                pace=self.delivery.paced,
                loop=loop,
                on_state=self.set_source_state,
                on_reconnect=self.stats.reconnect,
                on_stall=self.stats.stall,
                on_end=self._source_end,
                stall_timeout_s=stall_timeout_s,
            )

    @property
    def mode(self) -> Mode:
        return self.delivery.mode

    @property
    def source(self) -> FrameSource | None:
        return self.capture.source if self.capture else None

    # -- state ---------------------------------------------------------------------------------------------------
    @property
    def state(self) -> State:
        if self._stopped and self._source_state != "ended":
            return "stopped"  # a file played to its end stays "ended"
        if self.keeper.state != "ready":
            return self.keeper.state
        return self._source_state

    @property
    def detector(self) -> Detector | None:
        return self.keeper.detector

    @property
    def ready(self) -> bool:
        return self.keeper.detector is not None

    def _note(self, error: str | None, clears: bool) -> None:
        """Record an error (kept as last_error with its time), or clear the current one when things work."""
        if error is not None:
            self.error, self.last_error, self.last_error_at = error, error, time.time()
        elif clears:
            self.error = None
            self._repeats.reset()
        repeated = self._repeats.line(error, time.monotonic()) if error else None
        state = self.state
        if state != self._shown_state:
            self._shown_state, self.state_since = state, time.time()
            said = f" ({error})" if error else ""
            if state == "ended" and not error:
                said = " (the file played to its end; its last results are still served; --exit-at-end stops then)"
            log.info("stream %s: %s%s", self.stream_id, state, said)
        elif repeated:
            log.warning("stream %s: %s", self.stream_id, repeated)

    def set_source_state(self, state: SourceState, error: str | None = None) -> None:
        with self._lock:
            self._source_state = state
            self._note(error, clears=state == "running" and self.keeper.state == "ready")

    def _set_detector_state(self, state: DetectorState, error: str | None = None) -> None:
        """The keeper's report of a change (its `state` is already the new one): log it and keep the error."""
        with self._lock:
            self._note(error, clears=state == "ready" and self._source_state == "running")

    def health(self) -> Health:
        latest = self.latest
        return Health(
            state=self.state,
            since=self.state_since,
            error=self.error,
            last_error=self.last_error,
            last_error_at=self.last_error_at,
            frame_age_s=None if latest is None else round(latest.age_s, 3),
            detector_restarts=self.stats.restarts,
            stalls=self.stats.stalls,
            workers_alive=self.workers_alive,
            unstable=self._unstable(),
        )

    def _unstable(self) -> str | None:
        count = self.stats.recent_reconnects()
        return f"unstable: {count} reconnects in {FLAPPING_WINDOW_S:g} s" if count >= FLAPPING_RECONNECTS else None

    # -- control -----------------------------------------------------------------------------------------------
    def add_listener(self, listener: Callable[[FrameResult], None]) -> None:
        """Called on the decode thread for every result; keep it cheap (metrics)."""
        self._listeners.append(listener)

    def start(self) -> None:
        self._spawn(self._load_then_run, "load")

    def begin_stop(self) -> None:
        """Signal every thread to stop and end every subscriber's stream; `stop` waits and releases devices."""
        self._stop.set()
        if self.capture is not None:
            self.capture.begin_stop()
        self.results.close()

    def stop(self, timeout: float = 5.0) -> bool:
        """Threads joined within `timeout`, devices released; False when the source's thread was left behind."""
        self.begin_stop()
        deadline = time.monotonic() + timeout
        released = self.capture is None or self.capture.stop(max(0.0, deadline - time.monotonic()))
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))
        self.keeper.release()  # a detector stuck in an inference is left to its thread
        with self._lock:
            self._stopped = True
            self._note(None, clears=False)
        return released

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=self._guarded(target, name), name=f"{self.stream_id}-{name}", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _guarded(self, target: Callable[[], None], name: str) -> Callable[[], None]:
        """A worker that raises on a bug is logged and restarted, so the stream keeps going."""

        def run() -> None:
            while not self._stop.is_set():
                try:
                    target()
                    return
                except Exception as exc:
                    self.stats.restart()
                    log.exception("stream %s: the %s worker crashed; restarting it", self.stream_id, name)
                    with self._lock:
                        self._note(f"internal error in {name}: {type(exc).__name__}: {exc}; restarted", False)
                    self._stop.wait(1.0)

        return run

    @property
    def workers_alive(self) -> bool:
        if self._stopped or self.state == "ended":
            return True
        capture_ok = self.capture is None or self.capture.alive or self.detector is None
        return capture_ok and any(t.is_alive() for t in self._threads)

    # -- loading (the keeper's job; this starts the threads once a detector is in place) -------------------
    def _load_then_run(self) -> None:
        if not self.keeper.load():
            return
        if self.capture is not None:  # otherwise a group's capture calls offer()
            self.capture.start()
        self._spawn_infer_loops()
        self._spawn(self._decode_loop, "decode")

    def _reload_then_infer(self) -> None:
        if self.keeper.load():
            self._spawn_infer_loops()

    def _spawn_infer_loops(self) -> None:
        """One loop per frame that may be in inference at once: the stream's lanes, up to its engine's."""
        detector = self.detector
        lanes = min(self.lanes, detector.backend.lanes) if detector is not None else 1
        for lane in range(max(1, lanes)):
            self._spawn(self._infer_loop, "infer" if lane == 0 else f"infer{lane}")

    def check(self, now: float) -> None:
        """The watchdog's call: a stuck inference reloads the detector, a stalled source is reopened."""
        if self.keeper.check():
            self._spawn(self._reload_then_infer, "reload")
        else:
            self._fit_threads()
        if self.capture is not None and self.detector is not None:
            self.capture.check(now)

    def _fit_threads(self) -> None:
        """A lone camera's engine on the threads that keep up with it (`CameraThreads`), loaded beside the one in
        place and swapped in without a pause."""
        fit, detector = self.camera_threads, self.detector
        if fit is None or detector is None or self.mode != "live":
            return
        keeper = self.keeper
        fps_in, inference_s = self.stats.fps_in(), keeper.normal_s  # read once: the log gives what was weighed
        threads = fit.wanted(detector, inference_s, keeper.recent_inferences, fps_in, time.monotonic())
        if threads:
            why = f"{(inference_s or 0) * 1e3:.0f} ms an inference, a frame every {1e3 / fps_in:.0f} ms"
            self._spawn(lambda: self._rethread(fit, threads, why), "threads")

    def _rethread(self, fit: CameraThreads[Detector], threads: int, why: str) -> None:
        wait_s, detector, on = RETHREAD_FAILED_WAIT_S, None, f"{threads} thread{'' if threads == 1 else 's'}"
        try:
            detector = fit.load(self.delivery.buffers, threads)
            detector.warmup()
        except Exception as exc:  # noqa: BLE001 - the engine in place goes on; tried again much later
            if detector is not None:
                detector.close()
            log.warning("stream %s: could not load its engine on %s (%s); it stays as it is", self.stream_id, on, exc)
        else:
            wait_s = 0.0
            if detector is not None and self.keeper.replace(detector):
                log.info("stream %s: its engine now runs on %s (%s)", self.stream_id, on, why)
                self._spawn_infer_loops()
        finally:
            fit.changed(time.monotonic(), wait_s)

    # -- capture ---------------------------------------------------------------------------------------------
    def _source_end(self) -> None:
        self.delivery.end()

    def offer(self, frame: Frame) -> None:
        """A new frame from this pipeline's own capture, or from a group feeding several pipelines."""
        detector = self.detector if self.mode == "live" else self._detector_for_file()
        if detector is None:
            return  # loading or reloading: nothing to run it on yet
        if self.capture is None and self._source_state == "connecting":
            self.set_source_state("running")  # fed by a group whose capture was already running
        self.stats.frame_in()
        if self.motion is not None:
            verdict = self.motion.check(frame.image, clock := self._clock(frame))
            if not verdict.run:
                self.stats.frame_still()
                self._still_at = clock
                return
            if self.regions is not None:
                frame = self._with_regions(frame, verdict.boxes, clock, detector)
        if self.delivery.offer(frame, detector):
            self.stats.frame_dropped()

    def _with_regions(self, frame: Frame, moved: tuple[Box, ...], clock: float, detector: Detector) -> Frame:
        """The frame with the regions to run: around what moved and what the last result found."""
        assert self.regions is not None
        latest = self.latest
        tracked = [(d.box.x1, d.box.y1, d.box.x2, d.box.y2) for d in latest.detections] if latest else []
        height, width = frame.image.shape[:2]
        pre = detector.spec.preprocessing
        regions = self.regions.plan((width, height), moved, tracked, clock, (pre.width, pre.height))
        return replace(frame, regions=regions)

    def _detector_for_file(self) -> Detector | None:
        """A file's every frame is wanted: while its detector reloads, the capture waits instead of dropping."""
        while (detector := self.detector) is None and not self._stop.is_set():
            self._stop.wait(0.05)
        return detector

    def _clock(self, frame: Frame) -> float:
        """Seconds on the stream's own timeline: a file's position (it may play faster than real time), else now."""
        source = self.source
        if self.mode == "file" and source is not None and source.fps:
            return frame.index / source.fps
        return frame.captured_mono

    # -- inference ---------------------------------------------------------------------------------------------
    def _infer_loop(self) -> None:
        generation, detector = self.keeper.current()
        if detector is None:
            return
        while not self._stop.is_set() and self.keeper.is_current(generation):
            taken = self._take(generation, detector)
            if taken is None:
                continue
            number, item = taken
            if item is END:
                self._inferred.put((number, END))
                return
            frame, ready = cast(Delivered, item)
            try:
                outcome = self.keeper.infer(generation, detector, ready.tensor)
            except Exception as exc:  # noqa: BLE001 - e.g. an accelerator unplugged mid-run: count, report, go on
                self._inferred.put((number, SKIP))
                self.stats.error()
                with self._lock:
                    self._note(f"inference failed: {exc}", clears=False)
                self._stop.wait(0.5)
                continue
            if outcome is None:
                self._inferred.put((number, SKIP))
                self.stats.frame_dropped()  # its engine hung or died under it: no result, never a wrong one
                return  # the keeper gave up on this detector while it was stuck; a new loop runs the next one
            raw, inference_ms = outcome
            self._inferred.put((number, (frame, ready, raw, inference_ms, detector)))

    def _take(self, generation: int, detector: Detector) -> tuple[int, object] | None:
        """The next frame (or END) with its number, once the window has room; None when nothing came in time."""
        if not self._window.acquire(timeout=0.2):
            return None
        if not self.keeper.is_current(generation):  # given up on meanwhile: leave the frame to the new detector
            self._window.release()
            return None
        with self._take_lock:
            item = self.delivery.take(detector, 0.2)
            if item is None:
                self._window.release()
                return None
            number = self._taken
            self._taken += 1
            self._in_flight[number] = generation
        return number, item

    # -- decode ------------------------------------------------------------------------------------------------
    def _decode_loop(self) -> None:
        while not self._stop.is_set():
            try:
                number, item = self._inferred.get(timeout=0.2)
                if number >= self._next:  # an earlier one is a frame already given up on (`_next_in_order`)
                    self._pending[number] = item
            except queue.Empty:
                pass
            while (item := self._next_in_order()) is not None:
                if item is END:
                    self.set_source_state("ended")
                    return
                if item is not SKIP:
                    self._decode(item)

    def _next_in_order(self) -> object | None:
        """The result of the next frame to publish, SKIP for a frame whose detector was given up on while it ran
        (a stuck inference may never return), or None while it is still in inference."""
        number = self._next
        item = self._pending.pop(number, None)
        if item is None:
            generation = self._in_flight.get(number)
            if generation is None or self.keeper.is_current(generation):
                return None
            item = SKIP
        self._in_flight.pop(number, None)
        self._next += 1
        self._window.release()
        return item

    def _decode(self, item: object) -> None:
        frame, prepared, raw, inference_ms, detector = cast(
            tuple[Frame, Prepared, list[np.ndarray], float, Detector], item
        )
        t0 = time.perf_counter()
        partial = frame.regions is not None and bool(prepared.regions)  # motion regions: parts left unseen
        try:
            detections = detector.decode_frame(raw, prepared, partial=partial)
            if partial:
                latest = self.latest
                detections += unseen_since(latest.detections if latest else [], prepared.regions)
        except Exception as exc:  # noqa: BLE001 - a decoding failure loses one frame, never the stream
            self.stats.error()
            with self._lock:
                self._note(f"decoding failed: {exc}", clears=False)
            return
        self._publish(frame, prepared, detections, inference_ms, t0)

    def _publish(
        self, frame: Frame, prepared: Prepared, detections: list[Detection], inference_ms: float, t0: float
    ) -> None:
        decoded = time.perf_counter()
        post_ms = (decoded - t0) * 1e3
        height, width = frame.image.shape[:2]
        detections, zones, lines, held = self._track(detections, width, height, self._clock(frame))
        done = time.perf_counter()
        end_to_end = (done - frame.captured_mono) * 1e3
        tracking_ms = (done - decoded) * 1e3
        wait = max(0.0, end_to_end - prepared.preprocess_ms - inference_ms - post_ms - tracking_ms)
        timing = FrameTiming(
            preprocess_ms=prepared.preprocess_ms,
            inference_ms=inference_ms,
            postprocess_ms=post_ms,
            captured_at=frame.captured_at,
            capture_ms=frame.capture_ms,
            queue_wait_ms=wait,
            end_to_end_ms=end_to_end,
            tracking_ms=tracking_ms,
            inferences=prepared.inferences,
        )
        image, mono = frame.image, frame.captured_mono
        regions = tuple(r.box for r in prepared.regions)
        result = FrameResult(
            self.stream_id, frame.index, width, height, detections, timing, image, zones, lines, mono, held, regions
        )
        self.latest = result
        if self.motion is not None:
            self.motion.found([(d.box.x1, d.box.y1, d.box.x2, d.box.y2) for d in detections])
        if self.error is not None and self.state == "running":
            with self._lock:
                self._note(None, clears=True)  # frames flow again: no current error (last_error is kept)
        self.recent.append((frame.index, detections))
        self.stats.frame_processed(timing)
        self.results.publish(result)
        for listener in self._listeners:
            listener(result)

    def _track(
        self, detections: list[Detection], width: int, height: int, now: float
    ) -> tuple[list[Detection], tuple[ZoneState, ...], tuple[LineState, ...], frozenset[int]]:
        if self.tracker is None:
            return detections, (), (), frozenset()
        try:
            analysis = self.tracker.analyse(detections, width, height, now, self._still_at)  # set by the capture thread
        except Exception as exc:  # noqa: BLE001 - a tracker failure loses tracking on one frame, not the frame
            self.stats.error()
            with self._lock:
                self._note(f"tracking failed: {type(exc).__name__}: {exc}", clears=False)
            return detections, (), (), frozenset()
        return analysis.detections, analysis.zones, analysis.lines, analysis.held
