"""Decode still images with one clear error for each way a file can be unusable; tell videos from other files, and
say why a file is not a video (gone, sound only)."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import cv2
import numpy as np

from edge_inference.edge.config.paths import with_path_meant
from edge_inference.edge.errors import EdgeError

_JPEG_START, _JPEG_END = b"\xff\xd8", b"\xff\xd9"
_PNG_START, _PNG_END = b"\x89PNG\r\n\x1a\n", b"IEND"


FORMATS = "JPEG, PNG, BMP, WebP, TIFF, GIF or AVIF"  # what OpenCV decodes here, and this file reads the size of
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


def _gif_size(data: bytes) -> tuple[int, int] | None:
    """The logical screen, which every frame must fit in (OpenCV refuses a frame beyond it)."""
    return struct.unpack("<HH", data[6:10]) if len(data) >= 10 else None


def _boxes(data: bytes, start: int, end: int) -> list[tuple[bytes, int, int]]:
    """ISO base media file format boxes between start and end: (type, where its body starts, where it ends)."""
    boxes: list[tuple[bytes, int, int]] = []
    at = start
    while at + 8 <= end and len(boxes) < 4096:
        size, kind = struct.unpack(">I4s", data[at : at + 8])
        body = at + 8
        if size == 1 and at + 16 <= end:  # a 64-bit size follows the type
            size, body = struct.unpack(">Q", data[at + 8 : at + 16])[0], at + 16
        elif size == 0:  # to the end of the enclosing box
            size = end - at
        if size < body - at or at + size > end:
            break
        boxes.append((kind, body, at + size))
        at += size
    return boxes


def _isobmff_size(data: bytes) -> tuple[int, int] | None:
    """AVIF (and HEIF): the largest of the image spatial extents ('ispe') under meta/iprp/ipco: a grid image's
    whole canvas, not one of its tiles."""
    sizes = []
    for kind, body, end in _boxes(data, 0, len(data)):
        if kind != b"meta":
            continue
        for inner, inner_body, inner_end in _boxes(data, body + 4, end):  # meta is a full box: version and flags
            if inner != b"iprp":
                continue
            for prop, prop_body, prop_end in _boxes(data, inner_body, inner_end):
                if prop == b"ipco":
                    for item, item_body, item_end in _boxes(data, prop_body, prop_end):
                        if item == b"ispe" and item_end - item_body >= 12:
                            sizes.append(struct.unpack(">II", data[item_body + 4 : item_body + 12]))
    return max(sizes, key=lambda size: size[0] * size[1]) if sizes else None


_HEIF_BRANDS = {b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs"}
_VIDEO_BRANDS = {b"isom", b"iso2", b"mp41", b"mp42", b"avc1", b"qt  ", b"M4V ", b"3gp4", b"3gp5", b"dash"}


def _brands(data: bytes) -> set[bytes]:
    """An ISO base media file's major and compatible brands ('ftyp'), which say what it holds."""
    if data[4:8] != b"ftyp" or len(data) < 16:
        return set()
    size = min(struct.unpack(">I", data[:4])[0], len(data))
    return {data[8:12]} | {data[at : at + 4] for at in range(16, size - 3, 4)}


def _annex_b_video(data: bytes) -> bool:
    """A raw H.264 or H.265 stream (an RTSP dump, a camera's `.h264` export): a start code, then a parameter set,
    an access unit delimiter or SEI, which is how an encoder begins one."""
    start = 4 if data[:4] == b"\0\0\0\1" else 3 if data[:3] == b"\0\0\1" else 0
    if not start or len(data) <= start:
        return False
    header = data[start]
    return header & 0x1F in {6, 7, 9} or (header >> 1) & 0x3F in {32, 33, 35, 39}


def looks_like_video(data: bytes) -> bool:
    """The start of a file is a video container or stream: MP4/MOV/3GP, Matroska/WebM, AVI, MPEG-TS (a camcorder's
    .MTS, .m2ts: a sync byte, 'G', every 188 bytes), MPEG-PS, FLV, ASF/WMV or raw H.264/H.265; whatever the file
    is called."""
    return bool(
        _brands(data) & _VIDEO_BRANDS
        or data[:4] in (b"\x1aE\xdf\xa3", b"\0\0\1\xba")
        or (data[:4] == b"RIFF" and data[8:12] == b"AVI ")
        or data[:4] == b"FLV\x01"
        or data.startswith(_ASF_HEADER)
        or (not data.startswith(b"GIF") and all(len(data) > at and data[at] == 0x47 for at in (0, 188, 376)))
        or all(len(data) > at and data[at] == 0x47 for at in (4, 196, 388))  # M2TS: 4 bytes of time first
        or _annex_b_video(data)
    )


_ASF_HEADER = bytes.fromhex("3026b2758e66cf11a6d900aa0062ce6c")

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".gif", ".avif"}
VIDEO_SUFFIXES = {
    *(".mp4", ".avi", ".mkv", ".mov", ".webm", ".m4v", ".ts", ".mts", ".m2ts", ".mpg", ".mpeg", ".wmv", ".flv"),
    *(".3gp", ".h264", ".264", ".h265", ".265", ".hevc"),
}
SNIFFED_BYTES = 1024  # enough for every signature looks_like_video reads (an MPEG-TS's third sync byte is at 376)
NO_MEDIA = f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) or videos (.mp4, .mkv, ...)"


def is_video(path: Path) -> bool:
    """A video by its name, or by its first bytes where the name says nothing (an NVR's export with no suffix, a
    camcorder's .MOD): a file named as an image is an image."""
    suffix = path.suffix.lower()
    if suffix in VIDEO_SUFFIXES:
        return True
    if suffix in IMAGE_SUFFIXES:
        return False
    try:
        with path.open("rb") as file:
            return looks_like_video(file.read(SNIFFED_BYTES))
    except OSError:
        return False


def is_media(path: Path) -> bool:
    """An image or a video file, as a folder or a glob is read (`edge detect photos/`, Ultralytics' source=folder/)."""
    return path.is_file() and (path.suffix.lower() in IMAGE_SUFFIXES or is_video(path))


def media_in_folder(folder: Path) -> list[Path]:
    """The images and videos directly in `folder` (not its sub-folders), sorted by name."""
    return sorted(p for p in folder.iterdir() if is_media(p))


def _unsupported(data: bytes) -> str | None:
    """What a file is, where it is a known kind this service cannot take as an image, and what to do."""
    brands = _brands(data)
    if brands & _HEIF_BRANDS and b"avif" not in brands:
        return (
            "is a HEIC photo (an iPhone's default format), which OpenCV cannot decode; send a JPEG instead (on the "
            "iPhone: Settings > Camera > Formats > Most Compatible)"
        )
    if looks_like_video(data):
        return "is a video, and this takes one image; to detect on a video, give it as a stream's source"
    return None


_HEADERS = (
    (_JPEG_START, _jpeg_size),
    (_PNG_START, _png_size),
    (b"BM", _bmp_size),
    (b"II*\0", _tiff_size),
    (b"MM\0*", _tiff_size),
    (b"II+\0", _tiff_size),
    (b"MM\0+", _tiff_size),
    (b"GIF87a", _gif_size),
    (b"GIF89a", _gif_size),
)


def header_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) as the file's header claims it, read without decoding; None for another format or a header
    that cannot be read. The formats are those the service accepts: JPEG, PNG, BMP, WebP, TIFF, GIF and AVIF."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_size(data)
    if b"avif" in _brands(data):
        return _isobmff_size(data)
    for magic, reader in _HEADERS:
        if data.startswith(magic):
            return reader(data)
    return None


def check_pixels(data: bytes, name: str, max_pixels: int) -> None:
    """Refuse an image whose header claims more than `max_pixels`, or whose header cannot be read, before a single
    pixel is decoded. (The decoder holds a limit too: OPENCV_IO_MAX_IMAGE_PIXELS, set in edge_inference/__init__.)"""
    size = header_size(data)
    if size is None and (what := _unsupported(data)):
        raise ImageError(f"{name} {what}")
    if size is None or 0 in size:
        raise ImageError(
            f"{name}: not a readable image (its header cannot be read: another format, or damaged); send a "
            f"{FORMATS} file"
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
    if data.startswith(b"GIF8"):
        return b";" not in data[-16:]  # the trailer; OpenCV refuses a GIF without it, but says nothing of why
    return False


def decode_image(data: bytes, name: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """BGR uint8 image from encoded bytes (JPEG, PNG, BMP, WebP, TIFF, GIF's first frame, AVIF); the size is checked
    before decoding."""
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
        raise ImageError(f"{name}: not a readable image ({FORMATS} expected)")
    return image


def read_image(path: Path) -> np.ndarray:
    if not path.exists():
        raise ImageError(with_path_meant(f"{path}: no such file", path))
    if path.is_dir():
        raise ImageError(f"{path}: is a folder, not an image")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ImageError(f"{path}: cannot be read ({exc.strerror})") from None
    return decode_image(data, str(path))


PROBE_TIMEOUT_S = 10.0


def why_not_a_video(path: str) -> str:
    """The reason, as the end of "video NAME cannot be opened: ..."."""
    return file_trouble(path) or "not a video FFmpeg can decode (damaged, or another kind of file)"


def file_trouble(path: str) -> str | None:
    """The file is gone, or holds no picture; None when neither (then FFmpeg's own words say more)."""
    if not Path(path).exists():
        return with_path_meant("the file is not there (moved, deleted, or a drive not mounted)", path)
    kinds = stream_kinds(path)
    if kinds and "video" not in kinds:
        what = f"sound only ({kinds['audio']})" if "audio" in kinds else f"only {', '.join(sorted(kinds))} streams"
        return f"it holds {what}, no picture: give a file with a video track"
    return None


def stream_kinds(path: str) -> dict[str, str]:
    """{kind: codec} of the file's streams ("audio": "mp3"), by Debian's `ffprobe`; empty where it is not installed
    or cannot read the file."""
    ffprobe = shutil.which("ffprobe")
    if ffprobe is None:
        return {}
    target = f"./{path}" if path.startswith("-") else path  # never read as one of ffprobe's options
    command = [ffprobe, "-v", "error", "-show_entries", "stream=codec_type,codec_name", "-of", "csv=p=0", target]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    kinds: dict[str, str] = {}
    for line in done.stdout.splitlines():
        codec, _, kind = line.strip().partition(",")
        if kind:
            kinds.setdefault(kind, codec)
    return kinds
