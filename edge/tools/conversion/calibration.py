"""Frames of the user's own camera for converting a model: calibration frames drawn spread over the first half of
what the source gives, evaluation frames spread over the second half, so the conversion is judged on frames it was
not calibrated on. Kept as JPEG in memory (a 768x576 frame: ~60 KB against 1.3 MB decoded) while the source is read.

A camera mostly sees a still scene: frames spread over time alone can hold no person at all, and the activations of
what the user wants detected are then left to chance. The service's own motion gate (`edge/stream/motion.py`, its
default threshold) marks the frames where something moved, and half the calibration frames are drawn spread over
those (all over time where nothing moved).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
from tqdm import tqdm

from edge_inference.edge.config import MotionConfig
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.stream.motion import MotionGate
from edge_inference.edge.stream.sources import SourceError, open_source

READ_AT_MOST = 2000  # frames of a source read (a camera: about a minute at 30 fps); a file ends sooner
JPEG_QUALITY = 95


@dataclass(frozen=True)
class Frames:
    source: str
    read: int  # frames the source gave
    calibration: list[bytes]
    evaluation: list[bytes]
    moving: int = 0  # calibration frames where something moved (the motion gate's verdict)

    @staticmethod
    def decoded(encoded: list[bytes]) -> list[np.ndarray]:
        return [np.asarray(cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)) for jpeg in encoded]


def spread(items: list[bytes], count: int) -> list[bytes]:
    """`count` items evenly over `items` (all of them where there are fewer)."""
    return [items[i] for i in _spread_indices(list(range(len(items))), count)]


@dataclass(frozen=True)
class Read:
    jpegs: list[bytes]
    moving: list[bool]  # per frame: something moved since the frames before


def spread_over_motion(read: Read, count: int) -> tuple[list[bytes], int]:
    """`count` frames: half spread over those where something moved, the other half spread over the rest of the
    time (all spread over time where nothing moved); in the source's order. (frames, how many of them moved)."""
    every = list(range(len(read.jpegs)))
    moved = [i for i in every if read.moving[i]]
    if len(every) <= count or not moved:
        picked = _spread_indices(every, count)
    else:
        over_motion = set(_spread_indices(moved, count // 2))
        rest = [i for i in every if i not in over_motion]
        picked = sorted(over_motion | set(_spread_indices(rest, count - len(over_motion))))
    return [read.jpegs[i] for i in picked], sum(read.moving[i] for i in picked)


def _spread_indices(indices: list[int], count: int) -> list[int]:
    if len(indices) <= count:
        return list(indices)
    if count <= 1:
        return indices[:count]
    return [indices[round(i * (len(indices) - 1) / (count - 1))] for i in range(count)]


def _read(source: str, limit: int, progress: bool) -> Read:
    try:
        frames = open_source(source)
        frames.open()
    except (SourceError, OSError) as exc:
        raise EdgeError(f"cannot read {source} for calibration: {exc}") from None
    encoded: list[bytes] = []
    moving: list[bool] = []
    gate = MotionGate(MotionConfig())
    bar = tqdm(total=limit, desc="reading frames", unit="frame", disable=not progress, leave=False)
    try:
        while len(encoded) < limit:
            image = frames.read()
            if image is None:
                break
            ok, jpeg = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
            if ok:
                encoded.append(jpeg.tobytes())
                moving.append(gate.check(image, float(len(encoded))).moving >= gate.config.threshold)
            bar.update()
    except SourceError as exc:
        if not encoded:
            raise EdgeError(f"cannot read {source} for calibration: {exc}") from None
    finally:
        bar.close()
        frames.close()
    if moving:
        moving[0] = False  # the gate's first frame has no background to differ from
    return Read(encoded, moving)


def calibration_frames(
    calibrate: str, evaluate: str | None, calibration: int, evaluation: int, progress: bool = False
) -> Frames:
    """Frames to calibrate on and frames to judge on: halves of one source, or two sources."""
    first = _read(calibrate, READ_AT_MOST, progress)
    if evaluate is None:
        if len(first.jpegs) < 4:
            raise EdgeError(
                f"{calibrate} gave too few frames to calibrate on and judge by ({len(first.jpegs)}): give a video or "
                "a folder"
            )
        half = len(first.jpegs) // 2
        early = Read(first.jpegs[:half], first.moving[:half])
        chosen, moved = spread_over_motion(early, calibration)
        return Frames(calibrate, len(first.jpegs), chosen, spread(first.jpegs[half:], evaluation), moved)
    second = _read(evaluate, READ_AT_MOST, progress)
    if not first.jpegs or not second.jpegs:
        raise EdgeError(f"{calibrate if not first.jpegs else evaluate} gave no frames")
    chosen, moved = spread_over_motion(first, calibration)
    return Frames(calibrate, len(first.jpegs), chosen, spread(second.jpegs, evaluation), moved)
