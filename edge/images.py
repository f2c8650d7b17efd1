"""Decode still images with one clear error for each way a file can be unusable."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from edge.errors import EdgeError

_JPEG_START, _JPEG_END = b"\xff\xd8", b"\xff\xd9"
_PNG_START, _PNG_END = b"\x89PNG\r\n\x1a\n", b"IEND"


class ImageError(EdgeError):
    pass


def _truncated(data: bytes) -> bool:
    """libjpeg and libpng decode truncated files without failing (grey or black tail); catch that here."""
    if data.startswith(_JPEG_START):
        end = data.rfind(_JPEG_END)
        return end < 0 or len(data) - end > 4096  # bytes after EOI are allowed, a missing EOI is not
    if data.startswith(_PNG_START):
        return _PNG_END not in data[-64:]
    return False


def decode_image(data: bytes, name: str) -> np.ndarray:
    """BGR uint8 image from encoded bytes (JPEG, PNG, BMP, WebP, TIFF...)."""
    if not data:
        raise ImageError(f"{name}: the file is empty (0 bytes)")
    if _truncated(data):
        raise ImageError(f"{name}: the image is truncated (the file ends early); copy or download it again")
    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        raise ImageError(f"{name}: not a readable image (JPEG, PNG, BMP, WebP or TIFF expected)")
    return image


def read_image(path: Path) -> np.ndarray:
    if not path.exists():
        raise ImageError(f"{path}: no such file")
    if path.is_dir():
        raise ImageError(f"{path}: is a folder, not an image")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ImageError(f"{path}: cannot be read ({exc.strerror})") from None
    return decode_image(data, str(path))
