"""A big camera made of real footage: vtest.avi's street, fifteen times, on one 4K canvas (built here, never kept).

Each scene is vtest.avi shrunk to 640x480 (so the model sees its people, on tiles, at the scale it sees them in the
scene alone), played from its own start, laid off any tile grid on the letterbox's grey. People are 25-60 px tall on
the 3840x2160 frame: letterboxed whole into a 416 model, 3-6 px. `walking=N`: only the first N scenes play, the
others show the street empty (the per-pixel median of the video: people move on, the street stays), as a wide
camera sees people in a few places. `still=True` holds every scene on its first frame. Every frame has sensor noise
(Gaussian, sigma 2 grey levels), as a camera's has.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path
from typing import Any, cast

import cv2
import numpy as np
import supervision as sv  # at import: urllib3, under it, binds a socket to see whether IPv6 is there

from benchmarks.common import VTEST
from edge_inference.edge.detection.detector import Detector
from edge_inference.models.detection import BoxXYXY, Detection

SCENE = (640, 480)
GREY = 114  # the letterbox's grey: a scene's edge looks to the model as an image's edge does


def scene_places(size: tuple[int, int], count: int, seed: int) -> list[tuple[int, int]]:
    """Top-left corners for `count` scenes on a canvas of `size`: in rows, each moved by a random offset."""
    width, height = size
    rng = random.Random(seed)
    cols = max(1, width // (SCENE[0] + 40))
    rows = -(-count // cols)
    gap_x, gap_y = (width - cols * SCENE[0]) // cols, max(0, (height - rows * SCENE[1]) // rows)
    places = []
    for index in range(count):
        col, row = index % cols, index // cols
        x = col * (SCENE[0] + gap_x) + rng.randint(0, gap_x)
        y = min(row * (SCENE[1] + gap_y) + rng.randint(0, gap_y), height - SCENE[1])
        places.append((x, y))
    return places


@functools.lru_cache(maxsize=1)
def _vtest() -> tuple[np.ndarray, ...]:
    capture = cv2.VideoCapture(str(VTEST))
    video = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        video.append(frame)
    capture.release()
    return tuple(video)


@functools.lru_cache(maxsize=1024)
def _scene(index: int) -> np.ndarray:
    """vtest.avi's frame `index` at the scene's size: made when first asked (resizing all 795 took 1.8 s)."""
    video = _vtest()
    return cv2.resize(video[index % len(video)], SCENE, interpolation=cv2.INTER_AREA)


def vtest_scenes(frames: int, count: int, start_step: int = 40) -> list[list[np.ndarray]]:
    """`count` scenes of `frames` frames each, scene k starting `k * start_step` frames into vtest.avi (looping)."""
    return [[_scene(k * start_step + i) for i in range(frames)] for k in range(count)]


def empty_street() -> np.ndarray:
    """vtest.avi's street with nobody on it: the per-pixel median of 53 frames spread over the video."""
    return np.median(np.stack([_scene(i) for i in range(0, len(_vtest()), 15)]), axis=0).astype(np.uint8)


def write_mosaic(
    path: Path,
    frames: int,
    size: tuple[int, int] = (3840, 2160),
    scenes: int = 15,
    seed: int = 1,
    still: bool = False,
    walking: int | None = None,
    fps: float = 10.0,
) -> list[tuple[int, int]]:
    """The video at `path` (MJPG); the scenes' places, top-left corners in its pixels."""
    places = scene_places(size, scenes, seed)
    footage = vtest_scenes(1 if still else frames, scenes)
    if walking is not None:
        footage = [*footage[:walking], *([[empty_street()]] * (scenes - walking))]
    rng = np.random.default_rng(seed)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"MJPG"), fps, size)
    canvas = np.full((size[1], size[0], 3), GREY, np.uint8)
    for index in range(frames):
        for scene, (x, y) in zip(footage, places, strict=True):
            canvas[y : y + SCENE[1], x : x + SCENE[0]] = scene[min(index, len(scene) - 1)]
        noise = rng.normal(0, 2.0, canvas.shape).astype(np.float32)
        writer.write(np.clip(canvas + noise, 0, 255).astype(np.uint8))
    writer.release()
    return places


def slicer_detections(
    detector: Detector, image: np.ndarray, tile: tuple[int, int], overlap: tuple[int, int]
) -> list[Detection]:
    """supervision's InferenceSlicer over a frame, its callback the detector on each slice: an independent tiler
    (its own grid, its own merge) with the same model."""

    def callback(piece: np.ndarray) -> sv.Detections:
        found = detector.detect(piece).detections
        if not found:
            return sv.Detections.empty()
        return sv.Detections(
            xyxy=np.array([d.box.as_list(4) for d in found], np.float32),
            confidence=np.array([d.score for d in found], np.float32),
            class_id=np.array([d.class_id for d in found]),
        )

    slicer = sv.InferenceSlicer(callback=callback, slice_wh=tile, overlap_wh=overlap, iou_threshold=0.45)
    got = slicer(cast(Any, image))
    boxes, scores, classes = (cast(np.ndarray, a) for a in (got.xyxy, got.confidence, got.class_id))
    return [
        Detection(int(c), "", float(s), BoxXYXY(*map(float, b))) for b, s, c in zip(boxes, scores, classes, strict=True)
    ]
