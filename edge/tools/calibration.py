"""Frames of the user's own camera for converting a model: calibration frames drawn spread over the first half of
what the source gives, evaluation frames spread over the second half, so the conversion is judged on frames it was
not calibrated on. Kept as JPEG in memory (a 768x576 frame: ~60 KB against 1.3 MB decoded) while the source is read.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
from tqdm import tqdm

from edge_inference.edge.errors import EdgeError
from edge_inference.edge.stream.sources import SourceError, open_source

READ_AT_MOST = 2000  # frames of a source read (a camera: about a minute at 30 fps); a file ends sooner
JPEG_QUALITY = 95


@dataclass(frozen=True)
class Frames:
    source: str
    read: int  # frames the source gave
    calibration: list[bytes]
    evaluation: list[bytes]

    @staticmethod
    def decoded(encoded: list[bytes]) -> list[np.ndarray]:
        return [np.asarray(cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)) for jpeg in encoded]


def spread(items: list[bytes], count: int) -> list[bytes]:
    """`count` items evenly over `items` (all of them where there are fewer)."""
    if len(items) <= count:
        return list(items)
    return [items[round(i * (len(items) - 1) / (count - 1))] for i in range(count)] if count > 1 else items[:1]


def _read(source: str, limit: int, progress: bool) -> list[bytes]:
    try:
        frames = open_source(source)
        frames.open()
    except (SourceError, OSError) as exc:
        raise EdgeError(f"cannot read {source} for calibration: {exc}") from None
    encoded: list[bytes] = []
    bar = tqdm(total=limit, desc="reading frames", unit="frame", disable=not progress, leave=False)
    try:
        while len(encoded) < limit:
            image = frames.read()
            if image is None:
                break
            ok, jpeg = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
            if ok:
                encoded.append(jpeg.tobytes())
            bar.update()
    except SourceError as exc:
        if not encoded:
            raise EdgeError(f"cannot read {source} for calibration: {exc}") from None
    finally:
        bar.close()
        frames.close()
    return encoded


def calibration_frames(
    calibrate: str, evaluate: str | None, calibration: int, evaluation: int, progress: bool = False
) -> Frames:
    """Frames to calibrate on and frames to judge on: halves of one source, or two sources."""
    first = _read(calibrate, READ_AT_MOST, progress)
    if evaluate is None:
        if len(first) < 4:
            raise EdgeError(
                f"{calibrate} gave too few frames to calibrate on and judge by ({len(first)}): give a video or a folder"
            )
        half = len(first) // 2
        return Frames(calibrate, len(first), spread(first[:half], calibration), spread(first[half:], evaluation))
    second = _read(evaluate, READ_AT_MOST, progress)
    if not first or not second:
        raise EdgeError(f"{calibrate if not first else evaluate} gave no frames")
    return Frames(calibrate, len(first), spread(first, calibration), spread(second, evaluation))
