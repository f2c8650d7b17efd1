"""Frames of the user's own camera for converting a model: calibration frames drawn spread over the first half of
what the source gives, evaluation frames spread over the second half, so the conversion is judged on frames it was
not calibrated on. Kept as JPEG in memory (a 768x576 frame: ~60 KB against 1.3 MB decoded) while the source is read,
and no more of them than twice what is drawn: past that, every other one kept is let go and only every second frame
after it is kept, so what is kept stays spread over all that was read (a 4K camera's frames are ~0.5 MB each even as
JPEG: 2000 of them took 1 GB). They are decoded one block at a time where they are used.

A camera mostly sees a still scene: frames spread over time alone can hold no person at all, and the activations of
what the user wants detected are then left to chance. The service's own motion gate (`edge/stream/motion.py`, its
default threshold) marks the frames where something moved, and half the calibration frames are drawn spread over
those (all over time where nothing moved).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from edge_inference.edge.config import MotionConfig
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.stream.motion import MotionGate
from edge_inference.edge.stream.sources import NETWORK_READ_TIMEOUT_MS, SourceError, open_source
from edge_inference.edge.tools.progress import shown_progress

READ_AT_MOST = 2000  # frames of a source read (a camera: about a minute at 30 fps); a file ends sooner
# A camera whose next frame took this long has stopped, even where its last buffered frames still trickle out one
# per read timeout (an RTSP camera frozen mid-read gave two more, 10 s apart, before its read failed: 30 s lost)
QUIET_S = NETWORK_READ_TIMEOUT_MS / 1000
JPEG_QUALITY = 95


@dataclass(frozen=True)
class Frames:
    source: str
    read: int  # frames the source gave
    calibration: list[bytes]
    evaluation: list[bytes]
    moving: int = 0  # calibration frames where something moved (the motion gate's verdict)
    stopped: str = ""  # why a source stopped giving frames before its end (a camera gone quiet), when it did

    @staticmethod
    def decoded(encoded: list[bytes]) -> Iterator[np.ndarray]:
        """Each frame decoded as it is asked for (a 4K frame is 25 MB decoded: a hundred at once took 2.5 GB)."""
        return (np.asarray(cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)) for jpeg in encoded)


def spread(items: list[bytes], count: int) -> list[bytes]:
    """`count` items evenly over `items` (all of them where there are fewer)."""
    return [items[i] for i in _spread_indices(list(range(len(items))), count)]


@dataclass(frozen=True)
class Read:
    jpegs: list[bytes]
    moving: list[bool]  # per frame: something moved since the frames before
    seen: int = 0  # frames the source gave; those kept are spread evenly over them
    stopped: str = ""  # the source's error that ended the reading early, if one did


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


def _read(source: str, keep: int, progress: bool) -> Read:
    """Up to READ_AT_MOST frames of `source`, at most `keep` of them kept, spread evenly over all it gave."""
    try:
        frames = open_source(source)
        frames.open()
    except (SourceError, OSError) as exc:
        raise EdgeError(f"cannot read {source} for calibration: {exc}") from None
    kept = _Kept(keep)
    gate = MotionGate(MotionConfig())
    bar = shown_progress(READ_AT_MOST, "reading frames", "frame", progress, estimate=False, leave=False)
    stopped = ""
    try:
        while kept.seen < READ_AT_MOST:
            asked = time.monotonic()
            image = frames.read()
            if image is None:
                break
            if frames.live and kept.jpegs and time.monotonic() - asked >= QUIET_S:
                raise SourceError(f"{frames.description} sent no frame for {QUIET_S:.0f} s")
            kept.offer(image, gate.check(image, float(kept.seen + 1)).moving >= gate.config.threshold)
            bar.update()
    except SourceError as exc:
        if not kept.jpegs:
            raise EdgeError(f"cannot read {source} for calibration: {exc}") from None
        stopped = f"after {kept.seen} frames: {exc}"  # a camera gone quiet is said, not hidden in a smaller table
    finally:
        bar.close()
        frames.close()
    if kept.moving:
        kept.moving[0] = False  # the gate's first frame has no background to differ from
    return Read(kept.jpegs, kept.moving, kept.seen, stopped)


class _Kept:
    """Frames as JPEG, every `stride`-th one seen; at `keep` of them every other is let go and the stride doubles."""

    def __init__(self, keep: int) -> None:
        self.keep, self.stride, self.seen = max(keep, 2), 1, 0
        self.jpegs: list[bytes] = []
        self.moving: list[bool] = []

    def offer(self, image: np.ndarray, moving: bool) -> None:
        if self.seen % self.stride == 0:
            ok, jpeg = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
            if ok:
                self.jpegs.append(jpeg.tobytes())
                self.moving.append(moving)
            if len(self.jpegs) >= self.keep:
                self.jpegs, self.moving, self.stride = self.jpegs[::2], self.moving[::2], self.stride * 2
        self.seen += 1


def calibration_frames(
    calibrate: str, evaluate: str | None, calibration: int, evaluation: int, progress: bool = False
) -> Frames:
    """Frames to calibrate on and frames to judge on: halves of one source, or two sources."""
    first = _read(calibrate, 2 * (calibration + (evaluation if evaluate is None else 0)), progress)
    if evaluate is None:
        if len(first.jpegs) < 4:
            raise EdgeError(
                f"{calibrate} gave too few frames to calibrate on and judge by ({len(first.jpegs)}): give a longer "
                "video, or a folder of 4 images or more"
            )
        half = len(first.jpegs) // 2
        early = Read(first.jpegs[:half], first.moving[:half])
        chosen, moved = spread_over_motion(early, calibration)
        return Frames(calibrate, first.seen, chosen, spread(first.jpegs[half:], evaluation), moved, first.stopped)
    second = _read(evaluate, 2 * evaluation, progress)
    if not first.jpegs or not second.jpegs:
        raise EdgeError(f"{calibrate if not first.jpegs else evaluate} gave no frames")
    chosen, moved = spread_over_motion(first, calibration)
    stopped = "; ".join(read.stopped for read in (first, second) if read.stopped)
    return Frames(calibrate, first.seen, chosen, spread(second.jpegs, evaluation), moved, stopped)


def shortfalls(frames: Frames, asked: tuple[int, int]) -> list[str]:
    """What the user is told where the footage gave less than asked: the table's figures then stand on fewer frames
    (a camera that went quiet after a few seconds once gave a verdict on 15 frames without a word)."""
    notes = [f"the footage stopped {frames.stopped}"] if frames.stopped else []
    got = (len(frames.calibration), len(frames.evaluation))
    if got[0] < asked[0] or got[1] < asked[1]:
        notes.append(
            f"calibrated on {got[0]} and judged on {got[1]} frames where --frames asked for {asked[0]} and "
            f"{asked[1]} (the footage gave {frames.read}): the figures are surer on longer footage"
        )
    return notes


def other_footage(calibrate: str, evaluate: str | None) -> tuple[str | None, list[str]]:
    """`--eval` as given, or None (the second half of `--calibrate`) where it names the same file or folder: judged
    on the very frames it was calibrated on, the agreement would flatter it. A camera named twice is kept: its
    frames read later are others."""
    if evaluate is None or not Path(evaluate).exists() or not Path(calibrate).exists():
        return evaluate, []
    if Path(evaluate).resolve() != Path(calibrate).resolve():
        return evaluate, []
    return None, [f"--eval names the footage --calibrate reads: judged on its second half instead ({calibrate})"]
