"""One stream: capture -> inference -> finish on three threads, results fanned out to subscribers.

Live sources (cameras, network streams) keep only the newest frame, so latency never builds up behind a slow
backend; skipped frames are counted. File sources deliver every frame in order, paced at the file's fps or as fast
as the backend allows, and are prepared (pre-processed) on the capture thread so the engine never waits for them.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np

from edge.capture import CaptureLoop
from edge.detector import Detector, Prepared
from edge.publish import Broadcaster
from edge.sources import Frame, FrameSource
from edge.stats import FrameTiming, StreamStats
from models.detection import Detection

log = logging.getLogger("edge.pipeline")

Mode = Literal["live", "file"]
State = Literal["loading", "connecting", "running", "reconnecting", "ended", "failed", "stopped"]
_END = object()  # end of a finite source, passed down the stages


@dataclass(frozen=True)
class FrameResult:
    stream_id: str
    index: int
    width: int
    height: int
    detections: list[Detection]
    timing: FrameTiming
    image: np.ndarray = field(repr=False)
    payload: str = ""  # the JSON event, serialised once for every subscriber
    # Encodings made once and shared by every client (SSE bytes, JPEGs); written by whoever needs one first.
    encoded: dict[object, bytes] = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return json.loads(self.payload)


class LatestSlot:
    """Holds one frame; a newer frame replaces an unconsumed one."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._item: Frame | None = None

    def put(self, item: Frame) -> bool:
        """True when an unconsumed frame was replaced (dropped)."""
        with self._cond:
            replaced = self._item is not None
            self._item = item
            self._cond.notify()
            return replaced

    def take(self, timeout: float) -> Frame | None:
        with self._cond:
            if self._item is None:
                self._cond.wait(timeout)
            item, self._item = self._item, None
            return item


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
        labels: dict[str, str] | None = None,
    ) -> None:
        self.stream_id = stream_id
        self.source = source
        self.mode: Mode = mode or ("live" if source is None or source.live else "file")
        self.pace, self.loop = pace, loop
        self.labels = labels or {}  # model/backend names for metrics before the detector has loaded
        self._load_detector = load_detector
        self.detector: Detector | None = None
        self.state: State = "loading"
        self.last_error: str | None = None
        self.stats = StreamStats()
        self.results: Broadcaster[FrameResult] = Broadcaster()
        self.latest: FrameResult | None = None
        # (frame index, detections) of recent results, for agreement between pipelines fed the same frames
        self.recent: deque[tuple[int, list[Detection]]] = deque(maxlen=300)
        self._listeners: list[Callable[[FrameResult], None]] = []
        self._stop = threading.Event()
        self._slot = LatestSlot()
        self._prepared: queue.Queue[Any] = queue.Queue(maxsize=2)
        self._inferred: queue.Queue[Any] = queue.Queue(maxsize=2)
        self._threads: list[threading.Thread] = []

    # -- control -----------------------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.detector is not None

    def add_listener(self, listener: Callable[[FrameResult], None]) -> None:
        """Called on the finishing thread for every result; keep it cheap (metrics)."""
        self._listeners.append(listener)

    def start(self) -> None:
        self._spawn(self._load_then_run, "load")

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        if self.source is not None:
            self.source.close()
        self.results.close()
        if self.detector is not None:
            self.detector.close()
        if self.state not in ("failed", "ended"):
            self.state = "stopped"

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=f"{self.stream_id}-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def set_state(self, state: State, error: str | None = None) -> None:
        if error is not None:
            self.last_error = error
        if state != self.state:
            log.info("stream %s: %s%s", self.stream_id, state, f" ({error})" if error else "")
        self.state = state

    def _load_then_run(self) -> None:
        try:
            # file mode prepares ahead: 2 queued + 1 in the engine + 1 being filled
            detector = self._load_detector(4 if self.mode == "file" else 2)
            detector.warmup()
        except Exception as exc:  # noqa: BLE001 - any loading failure ends this stream only, with its message
            self.set_state("failed", str(exc))
            log.error("stream %s: cannot load its model: %s", self.stream_id, exc)
            return
        self.detector = detector
        self.set_state("connecting")
        if self.source is not None:  # otherwise a group's capture calls offer()
            self._spawn(self._capture, "capture")
        self._spawn(self._infer_loop, "infer")
        self._spawn(self._finish_loop, "finish")

    # -- capture ---------------------------------------------------------------------------------------------
    def _capture(self) -> None:
        assert self.source is not None
        CaptureLoop(
            self.source,
            self.offer,
            stop=self._stop,
            pace=self.pace and self.mode == "file",
            loop=self.loop,
            on_state=self.set_state,  # type: ignore[arg-type]
            on_reconnect=self.stats.reconnect,
            on_end=lambda: self._hand_on(self._prepared, _END),
        ).run()

    def offer(self, frame: Frame) -> None:
        """A new frame from this pipeline's own capture, or from a group feeding several pipelines."""
        if self.detector is None:
            return  # still loading: nothing to run it on yet
        if self.source is None and self.state == "connecting":
            self.set_state("running")  # fed by a group whose capture was already running
        self.stats.frame_in()
        if self.mode == "live":
            if self._slot.put(frame):
                self.stats.frame_dropped()
        else:
            self._hand_on(self._prepared, (frame, self.detector.prepare(frame.image)))

    def _hand_on(self, target: queue.Queue[Any], item: object) -> None:
        """Blocking put that still notices a stop."""
        while not self._stop.is_set():
            try:
                target.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    # -- inference ---------------------------------------------------------------------------------------------
    def _next_prepared(self) -> tuple[Frame, Prepared] | object | None:
        assert self.detector is not None
        if self.mode == "live":
            frame = self._slot.take(0.2)
            return None if frame is None else (frame, self.detector.prepare(frame.image))
        try:
            return self._prepared.get(timeout=0.2)
        except queue.Empty:
            return None

    def _infer_loop(self) -> None:
        assert self.detector is not None
        while not self._stop.is_set():
            item = self._next_prepared()
            if item is None:
                continue
            if item is _END:
                self._hand_on(self._inferred, _END)
                return
            frame, ready = cast(tuple[Frame, Prepared], item)
            t0 = time.perf_counter()
            try:
                raw = self.detector.infer(ready.tensor)
            except Exception as exc:  # noqa: BLE001 - e.g. an accelerator unplugged mid-run: count, report, go on
                self.stats.error()
                self.last_error = f"inference failed: {exc}"
                log.warning("stream %s: %s", self.stream_id, self.last_error)
                self._stop.wait(0.5)
                continue
            self._hand_on(self._inferred, (frame, ready, raw, (time.perf_counter() - t0) * 1e3))

    # -- finish ------------------------------------------------------------------------------------------------
    def _finish_loop(self) -> None:
        assert self.detector is not None
        while not self._stop.is_set():
            try:
                item = self._inferred.get(timeout=0.2)
            except queue.Empty:
                continue
            if item is _END:
                self.set_state("ended")
                return
            frame, prepared, raw, inference_ms = cast(tuple[Frame, Prepared, list[np.ndarray], float], item)
            t0 = time.perf_counter()
            try:
                detections = self.detector.finish(raw, prepared.transform)
            except Exception as exc:  # noqa: BLE001 - a decoding failure loses one frame, never the stream
                self.stats.error()
                self.last_error = f"decoding failed: {exc}"
                continue
            self._publish(frame, prepared, detections, inference_ms, t0)

    def _publish(
        self, frame: Frame, prepared: Prepared, detections: list[Detection], inference_ms: float, t0: float
    ) -> None:
        done = time.perf_counter()
        post_ms = (done - t0) * 1e3
        end_to_end = (done - frame.captured_mono) * 1e3
        wait = max(0.0, end_to_end - prepared.preprocess_ms - inference_ms - post_ms)
        timing = FrameTiming(
            frame.captured_at, frame.capture_ms, wait, prepared.preprocess_ms, inference_ms, post_ms, end_to_end
        )
        height, width = frame.image.shape[:2]
        payload = json.dumps(
            {
                "stream": self.stream_id,
                "frame": frame.index,
                "width": width,
                "height": height,
                "detections": [d.to_dict() for d in detections],
                "timing_ms": timing.to_dict(),
            }
        )
        result = FrameResult(self.stream_id, frame.index, width, height, detections, timing, frame.image, payload)
        self.latest = result
        self.recent.append((frame.index, detections))
        self.stats.frame_processed(timing)
        self.results.publish(result)
        for listener in self._listeners:
            listener(result)
