"""Labelled boxes drawn onto a BGR frame (for --save, snapshots and MJPEG)."""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import cv2
import numpy as np

from edge_inference.models.detection import Detection


def colour_for(label: str) -> tuple[int, int, int]:
    """A stable, well-saturated colour per label."""
    hue = zlib.crc32(label.encode()) % 180
    hsv = np.array([[[hue, 220, 255]]], dtype=np.uint8)
    b, g, r = cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)[0, 0]
    return int(b), int(g), int(r)


def draw_detections(image: np.ndarray, detections: Iterable[Detection]) -> np.ndarray:
    """Draws in place and returns the image."""
    thickness = max(1, round(min(image.shape[:2]) / 300))
    font_scale = max(0.4, min(image.shape[:2]) / 900)
    for det in detections:
        colour = colour_for(det.label)
        x1, y1, x2, y2 = (round(v) for v in (det.box.x1, det.box.y1, det.box.x2, det.box.y2))
        cv2.rectangle(image, (x1, y1), (x2, y2), colour, thickness)
        text = f"{det.label} {det.score:.2f}"
        (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, font_scale, 1)
        top = max(0, y1 - th - base - 2)
        cv2.rectangle(image, (x1, top), (x1 + tw + 2, top + th + base + 2), colour, -1)
        cv2.putText(
            image, text, (x1 + 1, top + th + 1), cv2.FONT_HERSHEY_SIMPLEX, font_scale, (0, 0, 0), 1, cv2.LINE_AA
        )
    return image


def render_jpeg(
    image: np.ndarray, detections: Iterable[Detection], *, height: int | None, quality: int, boxes: bool
) -> bytes:
    """An annotated, optionally downscaled JPEG of a frame; the frame itself is never modified."""
    scale = 1.0
    if height and height < image.shape[0]:
        scale = height / image.shape[0]
        frame = cv2.resize(image, (max(1, round(image.shape[1] * scale)), height), interpolation=cv2.INTER_AREA)
    else:
        frame = image.copy()
    if boxes:
        draw_detections(frame, (_scaled(d, scale) for d in detections))
    ok, encoded = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError("JPEG encoding failed")
    return encoded.tobytes()


def _scaled(detection: Detection, scale: float) -> Detection:
    if scale == 1.0:
        return detection
    return Detection(detection.class_id, detection.label, detection.score, detection.box.scale(scale, scale))
