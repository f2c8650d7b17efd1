"""Helpers for the benchmark scripts: where the shared media are, frames, percentiles, the machine's description."""

from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np

from edge.machine import describe_machine

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("EDGE_SHARED_DIR", REPO.parent / "shared")).resolve()
MODELS = SHARED / "models"
VTEST = SHARED / "media" / "vtest.avi"


def read_frames(path: Path, count: int, step: int = 1) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(path))
    frames: list[np.ndarray] = []
    index = 0
    while len(frames) < count:
        ok, frame = capture.read()
        if not ok:
            break
        if index % step == 0:
            frames.append(frame)
        index += 1
    capture.release()
    return frames


def pct(values: list[float] | np.ndarray, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else float("nan")


def machine() -> str:
    return describe_machine()
