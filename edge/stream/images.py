"""Decode still images with one clear error for each way a file can be unusable."""

from __future__ import annotations

import struct
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
    """From IHDR, which must come first: read directly, so a damaged later chunk (a wrong CRC, which libpng only
    warns about) cannot hide it."""
    if len(data) >= 24 and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    return None


# JPEG markers that carry a frame size: SOF0-SOF15 less DHT (C4), JPG (C8) and DAC (CC)
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM and RST0-7: no length follows


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """From the first frame header (SOFn), walking the marker segments that come before it."""
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in _JPEG_STANDALONE:
            at += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image or start of scan before any frame header
            return None
        length = struct.unpack(">H", data[at + 2 : at + 4])[0]
        if marker in _JPEG_FRAMES:
            if at + 9 > len(data) or length < 7:
                return None
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return width, height
        at += 2 + length
    return None


def _bmp_size(data: bytes) -> tuple[int, int] | None:
    if len(data) < 26:
        return None
    if struct.unpack("<I", data[14:18])[0] == 12:  # OS/2 BITMAPCOREHEADER: 16-bit sizes
        width, height = struct.unpack("<HH", data[18:22])
    else:
        width, height = struct.unpack("<ii", data[18:26])
    return abs(width), abs(height)  # a negative height means rows stored top-down


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk, body = data[12:16], data[20:30]
    if chunk == b"VP8 " and len(body) >= 10 and body[3:6] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", body[6:10])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(body) >= 5 and body[0] == 0x2F:
        bits = int.from_bytes(body[1:5], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(body) >= 10:
        return int.from_bytes(body[4:7], "little") + 1, int.from_bytes(body[7:10], "little") + 1
    return None


def _tiff_size(data: bytes) -> tuple[int, int] | None:
    """From the first image directory's ImageWidth (256) and ImageLength (257); classic TIFF and BigTIFF."""
    order = "<" if data[:2] == b"II" else ">"
    big = data[2:4] in (b"+\0", b"\0+")
    # classic: 2-byte entry count, 12-byte entries with the value at +8; BigTIFF: 8-byte count, 20-byte entries, +12
    count, entry, value_at, first = ("Q", 20, 12, 8) if big else ("H", 12, 8, 4)
    sizes = {}
    try:
        (directory,) = struct.unpack_from(order + ("Q" if big else "I"), data, first)
        (entries,) = struct.unpack_from(order + count, data, directory)
        start = directory + struct.calcsize(count)
        for index in range(min(entries, 4096)):
            tag, kind = struct.unpack_from(order + "HH", data, start + index * entry)
            if tag in (256, 257):  # SHORT (3) or LONG (4)
                at = start + index * entry + value_at
                sizes[tag] = struct.unpack_from(order + ("H" if kind == 3 else "I"), data, at)[0]
    except (struct.error, OverflowError):  # a directory that points past the end of the file (or of any file)
        return None
    return (sizes[256], sizes[257]) if len(sizes) == 2 else None


_HEADERS = (
    (_JPEG_START, _jpeg_size),
    (_PNG_START, _png_size),
    (b"BM", _bmp_size),
    (b"II*\0", _tiff_size),
    (b"MM\0*", _tiff_size),
    (b"II+\0", _tiff_size),
    (b"MM\0+", _tiff_size),
)


def header_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) as the file's header claims it, read without decoding; None for another format or a header
    that cannot be read. The formats are those the service accepts: JPEG, PNG, BMP, WebP and TIFF."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_size(data)
    for magic, reader in _HEADERS:
        if data.startswith(magic):
            return reader(data)
    return None


def check_pixels(data: bytes, name: str, max_pixels: int) -> None:
    """Refuse an image whose header claims more than `max_pixels`, or whose header cannot be read, before a single
    pixel is decoded. (The decoder holds a limit too: OPENCV_IO_MAX_IMAGE_PIXELS, set in edge_inference/__init__.)"""
    size = header_size(data)
    if size is None or 0 in size:
        raise ImageError(
            f"{name}: not a readable image (its header cannot be read: another format, or damaged); send a "
            "JPEG, PNG, BMP, WebP or TIFF file"
        )
    width, height = size
    if width * height > max_pixels:
        raise ImageTooLargeError(
            f"{name}: the image is larger than the {max_pixels / 1e6:g} megapixel limit ({width}x{height} claimed by "
            "its header); scale it down or raise max_upload_megapixels"
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
