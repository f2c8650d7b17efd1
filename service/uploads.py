"""Detectors for POST /detect: one per stream configuration, separate from the stream's own, loaded on first use."""

from __future__ import annotations

import threading

from edge.detector import Detector
from edge.loader import load_detector
from edge.streams import StreamManager, detector_config


class UploadDetectors:
    def __init__(self, manager: StreamManager) -> None:
        self.manager = manager
        self._detectors: dict[str, Detector] = {}
        self._locks: dict[str, threading.Lock] = {s: threading.Lock() for s in manager.pipelines}

    def lock(self, stream_id: str) -> threading.Lock:
        """Held while a detector is loaded or used: engines and input buffers are not shared between threads."""
        return self._locks[stream_id]

    def get(self, stream_id: str) -> Detector:
        """Call with the stream's lock held."""
        if stream_id not in self._detectors:
            config = detector_config(self.manager.stream_config(stream_id))
            self._detectors[stream_id] = load_detector(config, self.manager.settings)
        return self._detectors[stream_id]

    def close(self) -> None:
        for detector in self._detectors.values():
            detector.close()
