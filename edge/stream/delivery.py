"""How captured frames reach the inference thread: two strategies behind one interface.

- `LiveDelivery` (cameras, network streams, and every compare member): one slot with the newest frame; a newer frame
  replaces an unconsumed one (counted as dropped), so latency never builds up behind a slow backend. The inference
  thread prepares the frame it takes.
- `FileDelivery` (files read as files): every frame, in order. Frames are prepared on the capture thread and queued,
  so the engine never waits for pre-processing; a full queue holds the capture back. Its capture is paced at the
  file's fps when asked (a camera paces itself). Several inference threads may take from it (a lane each).

Both end the same way: after `end()`, `take` answers `END` once everything delivered before it was taken, and to
every take after that.
"""

from __future__ import annotations

import queue
import threading
from typing import Literal, Protocol

from edge_inference.edge.detection.detector import Detector, Prepared
from edge_inference.edge.stream.sources import Frame

Mode = Literal["live", "file"]
END = object()  # the source has ended and everything it delivered was taken
Delivered = tuple[Frame, Prepared]


class Delivery(Protocol):
    mode: Mode
    buffers: int  # input buffers the detector needs: tensors in flight at once
    paced: bool  # whether the capture paces reads at the source's fps

    def offer(self, frame: Frame, detector: Detector) -> bool:
        """Hand a frame on; True when an older, unconsumed frame was dropped for it."""
        ...

    def take(self, detector: Detector, timeout: float) -> Delivered | object | None:
        """The next frame, prepared; END after the end; None when nothing came within `timeout`."""
        ...

    def end(self) -> None:
        """The source has no more frames."""
        ...


def put_unless_stopped(target: queue.Queue[object], item: object, stop: threading.Event) -> None:
    """A blocking put that still notices a stop."""
    while not stop.is_set():
        try:
            target.put(item, timeout=0.2)
            return
        except queue.Full:
            continue


class LiveDelivery:
    mode: Mode = "live"
    buffers = 2  # one tensor in the engine, one being prepared

    def __init__(self, *, paced: bool = False) -> None:
        self.paced = paced  # a file played as if it were a camera is read at its own fps (cameras pace themselves)
        self._cond = threading.Condition()
        self._frame: Frame | None = None
        self._ended = False

    def offer(self, frame: Frame, detector: Detector) -> bool:
        with self._cond:
            replaced = self._frame is not None
            self._frame = frame
            self._cond.notify()
            return replaced

    def take(self, detector: Detector, timeout: float) -> Delivered | object | None:
        with self._cond:
            if self._frame is None and not self._ended:
                self._cond.wait(timeout)
            frame, self._frame = self._frame, None
            ended = self._ended
        if frame is None:
            return END if ended else None
        return frame, detector.prepare(frame.image, frame.regions)

    def end(self) -> None:
        with self._cond:
            self._ended = True
            self._cond.notify()


class FileDelivery:
    mode: Mode = "file"

    def __init__(self, stop: threading.Event, *, paced: bool, lanes: int = 1) -> None:
        self.paced = paced
        self.buffers = 3 + lanes  # 2 queued + one in each lane of the engine + 1 being filled
        self._stop = stop
        self._queue: queue.Queue[object] = queue.Queue(maxsize=2)
        self._ended = False

    def offer(self, frame: Frame, detector: Detector) -> bool:
        put_unless_stopped(self._queue, (frame, detector.prepare(frame.image, frame.regions)), self._stop)
        return False

    def take(self, detector: Detector, timeout: float) -> Delivered | object | None:
        if self._ended:
            return END  # for the other lanes, once one has taken it
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        self._ended = item is END
        return item

    def end(self) -> None:
        put_unless_stopped(self._queue, END, self._stop)


def delivery_for(mode: Mode, stop: threading.Event, *, pace: bool, lanes: int = 1) -> Delivery:
    return LiveDelivery(paced=pace) if mode == "live" else FileDelivery(stop, paced=pace, lanes=lanes)
