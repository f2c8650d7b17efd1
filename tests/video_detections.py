"""The detections of a model on every frame of a video: made once per machine and kept by the hashes of the model,
the video and the threshold, so the tracking tests run the tracker on the real model's boxes without running
the model over the whole video every time.

A fresh checkout has no copy yet: `start` begins making it on a thread of its own when the test session starts,
so the minute it takes on a loaded 2-core machine overlaps the tests before the ones that need it (which then wait).
Every parallel test worker starts it; a lock file lets one of them make it while the others wait and read it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from pathlib import Path

import cv2
import numpy as np

from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.detection.model_files import locate_model
from edge_inference.edge.settings import get_settings
from edge_inference.models.detection import BoxXYXY, Detection

Frames = list[list[Detection]]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class VideoDetections:
    def __init__(self, model: str, video: Path, conf: float) -> None:
        self.model, self.video, self.conf = model, video, conf
        self._done = threading.Event()
        self._frames: Frames | None = None
        self._error: BaseException | None = None
        self._started = False
        self._lock = threading.Lock()

    def _cache_file(self) -> Path:
        _, model_path = locate_model(self.model, get_settings())
        key = hashlib.sha256(f"{_sha256(model_path)}:{_sha256(self.video)}:{self.conf}".encode()).hexdigest()[:24]
        folder = Path(os.environ["EDGE_MODEL_CACHE"]).parent / "video-detections"
        return folder / f"{self.video.stem}-{key}.npz"

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._make, name="video-detections", daemon=True).start()

    def wait(self, timeout: float = 1200) -> None:
        if self._started:
            self._done.wait(timeout)

    def frames(self, timeout: float = 1200) -> Frames:
        self.start()
        if not self._done.wait(timeout):
            raise TimeoutError(f"the detections of {self.video} were not made within {timeout:g} s")
        if self._error is not None:
            raise self._error
        assert self._frames is not None
        return self._frames

    def _make(self) -> None:
        try:
            path = self._cache_file()
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                # parallel test workers (pytest-xdist) each start this: one makes the file, the others wait for it
                with open(path.with_suffix(".lock"), "a") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    if not path.exists():
                        self._detect_into(path)
            self._frames = self._read(path)
        except BaseException as exc:  # handed to the test that waits for them
            self._error = exc
        finally:
            self._done.set()

    def _detect_into(self, path: Path) -> None:
        # one thread: it runs beside the other tests
        detector = load_detector(DetectorConfig(self.model, backend="onnx", conf=self.conf, threads=1))
        rows: list[np.ndarray] = []
        labels: list[str] = []
        capture = cv2.VideoCapture(str(self.video))
        try:
            while True:
                ok, frame = capture.read()
                if not ok:
                    break
                result = detector.detect(frame)
                labels += [d.label for d in result.detections]
                box = [[*d.box.as_list(), d.score, d.class_id] for d in result.detections]
                rows.append(np.asarray(box, np.float64).reshape(-1, 6))
        finally:
            capture.release()
            detector.close()
        counts = np.asarray([len(r) for r in rows], np.int64)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".part.npz")
        np.savez(temporary, boxes=np.concatenate(rows), counts=counts, labels=np.asarray(labels, dtype=str))
        temporary.replace(path)

    @staticmethod
    def _read(path: Path) -> Frames:
        with np.load(path) as data:
            boxes, counts, labels = data["boxes"], data["counts"], data["labels"]
        frames: Frames = []
        start = 0
        for count in counts:
            frames.append(
                [
                    Detection(int(row[5]), str(labels[i]), float(row[4]), BoxXYXY(*map(float, row[:4])))
                    for i, row in enumerate(boxes[start : start + count], start)
                ]
            )
            start += int(count)
        return frames
