"""`edge detect clip.mp4`: every frame of a video, as Ultralytics' `predict source=clip.mp4` runs it: one JSON line
per frame with --json, else a summary of what was seen; --save writes the annotated video."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import click
import cv2
import numpy as np
from tqdm import tqdm

from edge_inference.edge.detection.detector import DetectionResult, Detector
from edge_inference.edge.detection.report import result_record
from edge_inference.edge.secrets import mask_url
from edge_inference.edge.stream.drawing import draw_detections
from edge_inference.edge.stream.images import VIDEO_SUFFIXES, ImageError, why_not_a_video
from edge_inference.edge.stream.sources import network_reason

DEFAULT_FPS = 25.0  # what an annotated video is written at when the file does not say its rate


class VideoTally:
    """What a summary says of a video: frames, each label's frames and its most at once, inference times."""

    def __init__(self) -> None:
        self.frames = 0
        self.size = (0, 0)
        self.seen: Counter[str] = Counter()  # label -> frames it was in
        self.most: Counter[str] = Counter()  # label -> most at once
        self.inference_ms: list[float] = []

    def add(self, labels: list[str], width: int, height: int, inference_ms: float) -> None:
        self.frames += 1
        self.size = (width, height)
        self.inference_ms.append(inference_ms)
        for label, count in Counter(labels).items():
            self.seen[label] += 1
            self.most[label] = max(self.most[label], count)

    def table(self, source: str, fps: float | None, engine: str) -> str:
        rate = f" at {fps:g} fps" if fps else ""
        median = statistics.median(self.inference_ms)
        lines = [
            f"{source}  {self.frames} frames, {self.size[0]}x{self.size[1]}{rate}  {engine}  "
            f"inference {median:.1f} ms median"
        ]
        if not self.seen:
            lines.append("  (no detections)")
            return "\n".join(lines)
        lines.append(f"  {'label':<16}{'frames':>8}{'most at once':>14}")
        for label, frames in self.seen.most_common():
            lines.append(f"  {label:<16}{frames:>8}{self.most[label]:>14}")
        return "\n".join(lines)


def named_path(source: Path | str) -> Path:
    """What a saved file is named after: a file's path, or a URL's path (`rtsp://cam/live/door` -> door)."""
    return Path(urlsplit(source).path or "stream") if isinstance(source, str) else source


def saved_as(save: Path, source: Path, many: bool, kinds: set[str], suffix: str) -> Path:
    """--save: the file it names (one input, a name with a suffix of `kinds`), else `<folder>/<stem><suffix>`."""
    if many or save.is_dir() or save.suffix.lower() not in kinds:
        save.mkdir(parents=True, exist_ok=True)
        return save / f"{source.stem}{suffix}"
    save.parent.mkdir(parents=True, exist_ok=True)
    return save


def detect_video(path: Path | str, detector: Detector, as_json: bool, save: Path | None, many: bool = False) -> bool:
    """Every frame of `path` (a file, or a stream's URL: until it ends, or Ctrl-C); False (said in one line) when
    it cannot be read as a video. `many`: other inputs share --save, a folder then."""
    capture = cv2.VideoCapture(str(path), cv2.CAP_FFMPEG)
    shown = mask_url(str(path))
    if not capture.isOpened():
        capture.release()
        what = why_not_a_video(str(path)) if isinstance(path, Path) else network_reason(path)
        click.echo(f"error: {shown}: cannot be opened as a video: {what}", err=True)
        return False
    rate = float(capture.get(cv2.CAP_PROP_FPS) or 0)
    fps = rate if 0 < rate < 1000 else None
    count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
    tally, writer = VideoTally(), None
    # drawn on a terminal only (tqdm's disable=None), on stderr: --json's lines and a log file stay clean
    bar = tqdm(total=count if count > 0 else None, disable=None, unit="frame", leave=False, desc=named_path(path).name)
    try:
        for frame in _frames(capture):
            bar.update(1)
            result = detector.detect(frame)
            tally.add([d.label for d in result.detections], result.width, result.height, result.timings.inference_ms)
            if as_json:
                click.echo(json.dumps(_frame_record(shown, result, detector, tally.frames - 1, fps)))
            if save is not None:
                writer = writer or _writer(
                    saved_as(save, named_path(path), many, VIDEO_SUFFIXES, ".mp4"), frame.shape[1], frame.shape[0], fps
                )
                writer.write(draw_detections(frame, result.detections))
    finally:
        bar.close()
        capture.release()
        if writer is not None:
            writer.release()
    if tally.frames == 0:
        click.echo(f"error: {shown}: no frame could be decoded (damaged, or a format FFmpeg cannot decode)", err=True)
        return False
    if not as_json:
        click.echo(_summary(tally, shown, fps, detector))
    return True


def _summary(tally: VideoTally, shown: str, fps: float | None, detector: Detector) -> str:
    """The table of what was seen, and the engine threads the loop chose, once it chose."""
    table = tally.table(shown, fps, f"{detector.spec.name} on {detector.backend.key}/{detector.backend.device}")
    judge = detector.loop_threads
    return table if judge is None or judge.record is None else f"{table}\n  engine threads: {judge.why}"


def _frames(capture: cv2.VideoCapture) -> Iterator[np.ndarray]:
    """The frames until the video ends; a stream has no end, so Ctrl-C ends it, with its summary and saved video."""
    while True:
        try:
            ok, frame = capture.read()
        except KeyboardInterrupt:
            return
        if not ok or frame is None:
            return
        yield frame


def _frame_record(shown: str, result: DetectionResult, detector: Detector, index: int, fps: float | None) -> dict:
    record = {**result_record(shown, result, detector), "frame": index}
    if fps:
        record["time_s"] = round(index / fps, 3)
    return record


def _writer(target: Path, width: int, height: int, fps: float | None) -> cv2.VideoWriter:
    writer = cv2.VideoWriter(str(target), cv2.VideoWriter.fourcc(*"mp4v"), fps or DEFAULT_FPS, (width, height))
    if not writer.isOpened():
        raise ImageError(f"cannot write {target}; use a .mp4 name in a writable folder")
    return writer
