"""Detectors for POST /detect: one per stream configuration, separate from the stream's own, loaded on first use.

A detector that fails to load is not retried on every request: the failure is remembered for a while and answered
with 503, while the stream's own retries (with backoff) say in /health/ready when the model is back.
"""

from __future__ import annotations

import threading
import time

from edge_inference.edge.detector import Detector
from edge_inference.edge.loader import load_detector
from edge_inference.edge.streams import StreamManager, detector_config

RETRY_LOAD_AFTER_S = 10.0


class UploadModelUnavailableError(Exception):
    """The stream's model cannot run uploads now; the message says why and when it is tried again."""


class UploadDetectors:
    def __init__(self, manager: StreamManager) -> None:
        self.manager = manager
        self._detectors: dict[str, Detector] = {}
        self._failed: dict[str, tuple[float, str]] = {}  # stream -> (when, why) of the last failed load
        self._locks: dict[str, threading.Lock] = {s: threading.Lock() for s in manager.pipelines}

    def lock(self, stream_id: str) -> threading.Lock:
        """Held while a detector is loaded or used: engines and input buffers are not shared between threads."""
        return self._locks[stream_id]

    def get(self, stream_id: str) -> Detector:
        """Call with the stream's lock held."""
        if stream_id in self._detectors:
            return self._detectors[stream_id]
        pipeline = self.manager.pipelines[stream_id]
        if not pipeline.ready:
            why = f": {pipeline.error}" if pipeline.error else ""
            raise UploadModelUnavailableError(f"stream {stream_id}'s model is not loaded ({pipeline.state}{why})")
        failed = self._failed.get(stream_id)
        if failed and time.monotonic() - failed[0] < RETRY_LOAD_AFTER_S:
            raise UploadModelUnavailableError(f"stream {stream_id}'s model failed to load for uploads: {failed[1]}")
        try:
            detector = load_detector(detector_config(self.manager.stream_config(stream_id)), self.manager.settings)
        except Exception as exc:  # noqa: BLE001 - any engine failure: remembered and answered with 503
            self._failed[stream_id] = (time.monotonic(), str(exc))
            raise UploadModelUnavailableError(f"stream {stream_id}'s model failed to load for uploads: {exc}") from None
        self._failed.pop(stream_id, None)
        self._detectors[stream_id] = detector
        return detector

    def close(self) -> None:
        for detector in self._detectors.values():
            detector.close()
