"""Decode still images with one clear error for each way a file can be unusable."""

from __future__ import annotations

import io
import struct
import warnings
from pathlib import Path

import cv2
import numpy as np

from edge_inference.edge.errors import EdgeError

_JPEG_START, _JPEG_END = b"\xff\xd8", b"\xff\xd9"
_PNG_START, _PNG_END = b"\x89PNG\r\n\x1a\n", b"IEND"


# Real photos are at most a few tens of megapixels; a tiny file claiming far more is a decompression bomb.
DEFAULT_MAX_PIXELS = 50_000_000


class ImageError(EdgeError):
    pass


class ImageTooLargeError(ImageError):
    pass


def _png_size(data: bytes) -> tuple[int, int] | None:
    """A PNG's size from its IHDR, which must come first: read directly, so a damaged later chunk (a wrong CRC, which
    Pillow refuses and libpng only warns about) cannot hide it."""
    if data.startswith(_PNG_START) and len(data) >= 24 and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    return None


def check_pixels(data: bytes, name: str, max_pixels: int) -> None:
    """Refuse an image whose header claims more than `max_pixels`, or whose header cannot be read, before a single
    pixel is decoded. (The decoder holds a limit too: OPENCV_IO_MAX_IMAGE_PIXELS, set in edge_inference/__init__.)"""
    from PIL import Image, UnidentifiedImageError

    size = _png_size(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            if size is None:
                with Image.open(io.BytesIO(data)) as image:  # lazy: reads the header only
                    size = image.size
        except Image.DecompressionBombError:  # Pillow's own limit (about 179 MP) tripped: far above ours
            size = (int(Image.MAX_IMAGE_PIXELS or 0) * 2 + 1, 1)
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
            raise ImageError(
                f"{name}: not a readable image (its header cannot be read: another format, or damaged); send a "
                "JPEG, PNG, BMP, WebP or TIFF file"
            ) from None
    width, height = size
    if width * height > max_pixels:
        claimed = f"{width}x{height}" if height > 1 else f"over {width / 1e6:.0f} megapixels"
        raise ImageTooLargeError(
            f"{name}: the image is larger than the {max_pixels / 1e6:g} megapixel limit ({claimed} claimed by its "
            "header); scale it down or raise max_upload_megapixels"
        )


def _truncated(data: bytes) -> bool:
    """libjpeg and libpng decode truncated files without failing (grey or black tail); catch that here."""
    if data.startswith(_JPEG_START):
        end = data.rfind(_JPEG_END)
        return end < 0 or len(data) - end > 4096  # bytes after EOI are allowed, a missing EOI is not
    if data.startswith(_PNG_START):
        return _PNG_END not in data[-64:]
    return False


def decode_image(data: bytes, name: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """BGR uint8 image from encoded bytes (JPEG, PNG, BMP, WebP, TIFF...); the size is checked before decoding."""
    if not data:
        raise ImageError(f"{name}: the file is empty (0 bytes)")
    check_pixels(data, name, max_pixels)
    if _truncated(data):
        raise ImageError(f"{name}: the image is truncated (the file ends early); copy or download it again")
    try:
        image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    except cv2.error:
        image = None  # e.g. a header OpenCV rejects (its own size limit): no image, the message below
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
