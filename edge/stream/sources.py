"""Frame sources: cameras, video files, network streams, cameras' snapshot URLs, still images and folders of images."""

from __future__ import annotations

import difflib
import glob
import http.client
import os
import socket
import ssl
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import cv2
import numpy as np

from edge_inference.edge.config.paths import HOST_AND_PORT, TYPED_SCHEME, path_meant
from edge_inference.edge.errors import EdgeError, connection_failure
from edge_inference.edge.secrets import mask_in, mask_url, password_encoding_advice
from edge_inference.edge.stream.images import (
    IMAGE_SUFFIXES,
    NO_MEDIA,
    ImageError,
    decode_image,
    is_media,
    is_video,
    media_in_folder,
    read_image,
    why_not_a_video,
)
from edge_inference.models.tiles import Region

# OpenCV's own warnings can echo stream URLs with their passwords; our messages replace them.
cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)

CAMERA_PREFIXES = ("/dev/video", "/dev/v4l/")
NETWORK_OPEN_TIMEOUT_MS = 15_000
NETWORK_READ_TIMEOUT_MS = 10_000
# the schemes with a TCP connection to try when a stream does not open, and their usual ports
DEFAULT_PORTS = {"rtsp": 554, "rtsps": 322, "rtmp": 1935, "http": 80, "https": 443, "tcp": None}
SNAPSHOT_FPS = 2.0  # a snapshot URL's default rate: most cameras answer a request in 0.1-0.5 s
SNAPSHOT_MAX_BYTES = 20 << 20
STREAM_PATH_SUFFIXES = (".mjpg", ".mjpeg", ".m3u8", ".mpd", ".mp4", ".mkv", ".avi", ".mov", ".webm", ".flv", ".ts")
STREAM_SCHEMES = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://", "udp://", "tcp://", "srt://")


class SourceError(EdgeError):
    """A source that cannot be opened or stopped delivering; live sources are retried."""


class SourceResized(SourceError):
    """A live source's frames changed size (a camera's resolution set anew): a decoder would squeeze them into the
    old size, so the source is opened again at the new one (no instability, no backoff)."""

    @classmethod
    def between(cls, description: str, old: tuple[int, int], new: tuple[int, int], why: str = "") -> SourceResized:
        now = f"{new[0]}x{new[1]}"
        return cls(f"{description} changed resolution from {old[0]}x{old[1]} to {now}{why}: reopening at {now}")


@dataclass(frozen=True, slots=True)
class Frame:
    image: np.ndarray
    index: int
    captured_at: float  # wall clock, seconds since the epoch
    captured_mono: float  # time.perf_counter() when the frame was in hand, for latencies
    capture_ms: float  # time spent reading/decoding it
    regions: tuple[Region, ...] | None = None  # where the detector looks (motion regions); None: its own choice


class FrameSource(ABC):
    """Opened once, read until it returns None (end) or raises SourceError (failure)."""

    live: bool = False  # True: frames arrive on their own clock; only the newest one matters

    def __init__(self, target: str) -> None:
        self.target = target

    @property
    def description(self) -> str:
        return mask_url(self.target)

    @property
    def fps(self) -> float | None:
        return None

    @abstractmethod
    def open(self) -> None: ...

    @abstractmethod
    def read(self) -> np.ndarray | None:
        """The next BGR image, or None when a finite source has ended."""

    def close(self) -> None:  # noqa: B027 - sources without handles need nothing here
        """Release the device or file."""

    def interrupt(self) -> None:  # noqa: B027 - most sources cannot be interrupted; the watchdog leaves them
        """End an open or read blocked in this source, from another thread (the watchdog's), where that is
        possible: it then fails, and its thread closes it."""

    @abstractmethod
    def fresh(self) -> FrameSource:
        """A new, unopened source with the same settings (the old one may still be blocked in a read)."""


class CaptureSource(FrameSource):
    """Anything cv2.VideoCapture opens: V4L2 cameras, video files, RTSP/HTTP streams through FFmpeg."""

    def __init__(
        self,
        target: str,
        *,
        live: bool,
        width: int | None = None,
        height: int | None = None,
        fps: float | None = None,
        size_check_s: float = 0.0,
    ) -> None:
        super().__init__(target)
        self.live = live
        self._want = (width, height, fps)
        self._capture: cv2.VideoCapture | None = None
        self.size_check_s = size_check_s  # an RTSP camera: how often ffprobe is asked its size (capture.py)

    def fresh(self) -> CaptureSource:
        width, height, fps = self._want
        return CaptureSource(
            self.target, live=self.live, width=width, height=height, fps=fps, size_check_s=self.size_check_s
        )

    def _open_capture(self) -> cv2.VideoCapture:
        if self.target.isdigit():
            return cv2.VideoCapture(int(self.target), cv2.CAP_V4L2)
        if is_camera(self.target):  # a udev name is read again at each open: a replug may renumber the device
            return cv2.VideoCapture(os.path.realpath(self.target), cv2.CAP_V4L2)
        if self.target.startswith(STREAM_SCHEMES):
            # FFmpeg's own clocks for network opens and reads, so most stalls end in an error, not a hang;
            # the pipeline's watchdog covers the rest.
            return cv2.VideoCapture(
                self.target,
                cv2.CAP_FFMPEG,
                [
                    cv2.CAP_PROP_OPEN_TIMEOUT_MSEC,
                    NETWORK_OPEN_TIMEOUT_MS,
                    cv2.CAP_PROP_READ_TIMEOUT_MSEC,
                    NETWORK_READ_TIMEOUT_MS,
                ],
            )
        return cv2.VideoCapture(self.target, cv2.CAP_FFMPEG)

    def open(self) -> None:
        self.close()
        capture = self._open_capture()
        if not capture.isOpened():
            capture.release()
            raise SourceError(self._unreachable_message())
        width, height, fps = self._want
        if width and height:
            capture.set(cv2.CAP_PROP_FRAME_WIDTH, width)
            capture.set(cv2.CAP_PROP_FRAME_HEIGHT, height)
        if fps:
            capture.set(cv2.CAP_PROP_FPS, fps)
        if self.live:
            capture.set(cv2.CAP_PROP_BUFFERSIZE, 1)  # cameras: do not queue stale frames in the driver
        self._capture = capture

    def _unreachable_message(self) -> str:
        name = self.description
        if is_camera(self.target):
            listing = "/dev/v4l/by-id" if self.target.startswith("/dev/v4l/") else "/dev/video*"
            return (
                f"camera {name} cannot be opened: check it is plugged in (ls {listing}), "
                "not used by another program, and that this user is in the 'video' group"
            )
        if self.target.startswith(STREAM_SCHEMES):
            return f"stream {name} cannot be opened: {network_reason(self.target)}"
        return f"video {name} cannot be opened: {why_not_a_video(self.target)}"

    @property
    def fps(self) -> float | None:
        if self._capture is None:
            return None
        value = float(self._capture.get(cv2.CAP_PROP_FPS) or 0)
        return value if 0 < value < 1000 else None

    def read(self) -> np.ndarray | None:
        if self._capture is None:
            raise SourceError(f"{self.description} is not open")
        ok, image = self._capture.read()
        if ok and image is not None:
            return image
        if self.live:
            raise SourceError(f"{self.description} stopped delivering frames")
        return None

    def close(self) -> None:
        if self._capture is not None:
            self._capture.release()
            self._capture = None


SLIDESHOW_FPS = 1.0  # stills alone, paced, with no `fps` given: a photo a second


class FilesSource(FrameSource):
    """A still image, a folder of images and videos, or a glob, in name order: an image is one frame, a video every
    frame of it (as `edge detect folder/` and Ultralytics' `source=folder/` run them). Paced, images come as a
    slideshow at `fps` a second, one a second when it is not given (a looping folder of stills ran at 40 fps, a whole
    core); with videos among them, at the first video's rate. Unpaced (`--no-pace`), as fast as they are processed."""

    def __init__(self, target: str, paths: list[Path], fps: float | None = None) -> None:
        super().__init__(target)
        self._paths = paths
        self._videos = {path for path in paths if is_video(path)}
        self._next = 0
        self._fps = fps
        self._video: CaptureSource | None = None
        self._video_fps: float | None = None

    @property
    def fps(self) -> float | None:
        if self._videos:
            return self._fps or self._video_fps
        return self._fps or SLIDESHOW_FPS

    def fresh(self) -> FilesSource:
        return FilesSource(self.target, self._paths, self._fps)

    def open(self) -> None:
        if not self._paths:
            raise SourceError(f"{self.description}: {NO_MEDIA} found")
        self.close()
        self._next = 0
        if self._fps is None and self._videos:  # paced by the first video's rate: read it before the first frame
            video = self._opened_video(next(path for path in self._paths if path in self._videos))
            self._video_fps = video.fps if video else None
            self.close()

    def read(self) -> np.ndarray | None:
        while True:
            if self._video is not None:
                frame = self._video.read()
                if frame is not None:
                    return frame
                self.close()
            if self._next >= len(self._paths):
                return None
            path = self._paths[self._next]
            self._next += 1
            if path in self._videos:
                self._opened_video(path)
                continue
            try:
                return read_image(path)
            except ImageError:
                continue  # one unreadable file in a folder does not end the stream; the next one is read

    def _opened_video(self, path: Path) -> CaptureSource | None:
        """The video opened as the one being read; one that cannot be opened is passed over, as a damaged image is."""
        video = CaptureSource(str(path), live=False)
        try:
            video.open()
        except SourceError:
            return None
        self._video = video
        return video

    def close(self) -> None:
        if self._video is not None:
            self._video.close()
            self._video = None


class HttpSource(FrameSource):
    """An http(s) URL, either a camera's snapshot URL, where each request answers one image (an ESP32-CAM's
    /capture, Hikvision's ISAPI picture, Reolink's Snap command, Home Assistant's camera proxy), polled at `fps`
    (SNAPSHOT_FPS unless set), or a stream (MJPEG, HLS, a video) for FFmpeg. The answer's Content-Type tells which,
    once: after that a reconnect goes straight to the right reader."""

    live = True

    def __init__(self, target: str, fps: float | None = None, kind: str | None = None) -> None:
        super().__init__(target)
        self._rate = fps
        # "snapshot" or "stream"; None until the first answer, unless the path names a video or a stream: then no
        # request is spent asking (a camera that serves one client at a time is not asked twice)
        named = urlsplit(target).path.lower().endswith(STREAM_PATH_SUFFIXES)
        self.kind = kind or ("stream" if named else None)
        self._stream: CaptureSource | None = None
        self._first: bytes | None = None  # the probe's image, the first frame
        self._due = 0.0
        self._opener, self._url = camera_opener(target)

    def fresh(self) -> HttpSource:
        return HttpSource(self.target, self._rate, self.kind)

    @property
    def fps(self) -> float | None:
        if self._stream is not None:
            return self._stream.fps
        if self.kind == "snapshot":
            return self._rate or SNAPSHOT_FPS
        return None

    def open(self) -> None:
        self.close()
        if self.kind != "stream":
            self._first = self._get(probe=True)
            if self._first is not None:
                self.kind, self._due = "snapshot", time.monotonic()
                return
            self.kind = "stream"
        stream = CaptureSource(self.target, live=True)
        stream.open()
        self._stream = stream

    def read(self) -> np.ndarray | None:
        if self._stream is not None:
            return self._stream.read()
        if self.kind != "snapshot":
            raise SourceError(f"{self.description} is not open")
        data = self._first
        self._first = None
        if data is None:
            wait = self._due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            data = self._get()
        self._due = max(self._due + 1 / (self._rate or SNAPSHOT_FPS), time.monotonic())
        try:
            return decode_image(data or b"", f"snapshot from {self.description}")
        except ImageError as exc:
            raise SourceError(str(exc)) from None

    def _get(self, probe: bool = False) -> bytes | None:
        """One answer's image; for the probe, None where the answer is not an image (a stream, a playlist)."""
        try:
            with self._opener.open(self._url, timeout=NETWORK_READ_TIMEOUT_MS / 1000) as answer:
                kind = answer.headers.get_content_type()
                # some cameras call their JPEG application/octet-stream: its first bytes say what it is
                head = answer.read(3) if kind == "application/octet-stream" else b""
                if not (kind.startswith("image/") or head == b"\xff\xd8\xff"):
                    if probe:
                        return None
                    raise SourceError(f"snapshot from {self.description}: the camera sent {kind}, not an image")
                data: bytes = head + answer.read(SNAPSHOT_MAX_BYTES + 1 - len(head))
        except urllib.error.HTTPError as exc:
            raise SourceError(http_refusal(self.description, exc.code)) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException):
            raise SourceError(f"snapshot from {self.description}: {network_reason(self.target)}") from None
        if len(data) > SNAPSHOT_MAX_BYTES:
            raise SourceError(f"snapshot from {self.description} is larger than {SNAPSHOT_MAX_BYTES >> 20} MB")
        return data

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


def camera_opener(target: str) -> tuple[urllib.request.OpenerDirector, str]:
    """A urllib opener for a camera's URL, and the URL without its user info: the user and password go by HTTP
    basic or digest authentication, as the camera asks (urllib answers the camera's 401 challenge). Certificates are
    not checked, as FFmpeg does not check them for streams (cameras serve self-signed ones), and no proxy from the
    environment is used: cameras are on the local network."""
    parts = urlsplit(target)
    passwords = urllib.request.HTTPPasswordMgrWithDefaultRealm()
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    netloc += f":{parts.port}" if parts.port else ""
    url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    if parts.username is not None:
        passwords.add_password(None, url, unquote(parts.username), unquote(parts.password or ""))
    unchecked = ssl.create_default_context()
    unchecked.check_hostname, unchecked.verify_mode = False, ssl.CERT_NONE
    handlers = (
        urllib.request.ProxyHandler({}),
        urllib.request.HTTPSHandler(context=unchecked),
        _RememberedBasic(passwords),
        urllib.request.HTTPDigestAuthHandler(passwords),
    )
    return urllib.request.build_opener(*handlers), url


class _RememberedBasic(urllib.request.HTTPBasicAuthHandler):
    """Basic authentication, sent with every request once the camera has asked for it and taken it: one request a
    snapshot, not two. Never before it asks: a camera that asks for digest never gets the password in the clear."""

    def __init__(self, passwords: urllib.request.HTTPPasswordMgr) -> None:
        super().__init__(passwords)
        self._taken: str | None = None

    def http_request(self, req: urllib.request.Request) -> urllib.request.Request:
        if self._taken is not None:
            req.add_unredirected_header(self.auth_header, self._taken)
        return req

    https_request = http_request

    def http_error_401(self, req, fp, code, msg, headers):  # urllib's signature, untyped there
        answer = super().http_error_401(req, fp, code, msg, headers)
        if answer is not None and 200 <= answer.status < 300:
            self._taken = req.unredirected_hdrs.get(self.auth_header)
        return answer


def http_refusal(name: str, status: int) -> str:
    if status in (401, 403):
        return f"{name} refused the user and password (HTTP {status}): check them in the URL"
    if status == 404:
        return f"{name} has no such page (HTTP 404): check the path (the camera's manual names its snapshot URL)"
    return f"{name} answered HTTP {status}: check the address, and that the camera is on"


def open_source(
    target: str,
    *,
    width: int | None = None,
    height: int | None = None,
    fps: float | None = None,
    size_check_s: float = 0.0,
) -> FrameSource:
    """Pick the source type from what the user wrote; nothing is opened yet."""
    target = _lower_scheme(target.strip())
    if not target:
        raise SourceError("empty source: give a camera index, /dev/videoN, a video or image file, a folder, or a URL")
    if is_camera(target):
        return CaptureSource(target, live=True, width=width, height=height, fps=fps)
    if target.startswith(("http://", "https://")):
        check_password_encoding(target)
        check_not_a_video_page(target)
        return HttpSource(target, fps)
    if target.startswith(STREAM_SCHEMES) or target.startswith("file://"):
        check_password_encoding(target)
        return CaptureSource(target, live=is_live(target), size_check_s=size_check_s)
    return _local_source(target, fps)


def is_live(target: str) -> bool:
    """Cameras and network streams run on their own clock (newest frame only); files and file:// URLs do not."""
    return is_camera(target) or target.startswith(STREAM_SCHEMES)


def is_camera(target: str) -> bool:
    """A V4L2 camera: an index, /dev/videoN, or a udev name for one. /dev/v4l/by-id/... keeps its name when a replug
    renumbers the device (video0 comes back as video2 while the old node is still held), and is a camera even while
    it is unplugged and the name is gone; another /dev name is one when it leads to a /dev/video node."""
    if target.isdigit() or target.startswith(CAMERA_PREFIXES):
        return True
    return target.startswith("/dev/") and os.path.realpath(target).startswith("/dev/video")


def camera_device(target: str) -> str | None:
    """The V4L2 device a camera source reads (`0` is /dev/video0; a udev name, what it leads to now); None for
    anything else."""
    target = target.strip()
    if not is_camera(target):
        return None
    return f"/dev/video{int(target)}" if target.isdigit() else os.path.realpath(target)


def _local_source(target: str, fps: float | None = None) -> FrameSource:
    """A folder, a glob, an image or a video file on this machine (`fps` paces images; a video has its own)."""
    path = Path(target).expanduser()
    if path.is_dir():
        return FilesSource(target, media_in_folder(path), fps)
    if any(ch in target for ch in "*?["):
        matches = sorted(Path(p) for p in glob.glob(os.path.expanduser(target)))
        return FilesSource(target, [p for p in matches if is_media(p)], fps)
    if path.suffix.lower() in IMAGE_SUFFIXES:
        if not path.is_file():
            raise SourceError(_with_address_meant(f"image {mask_url(target)} does not exist", target, path_meant(path)))
        return FilesSource(target, [path], fps)
    if not path.exists():
        what = f"source {mask_url(target)} is not a camera, URL, or existing file or folder"
        raise SourceError(_with_address_meant(what, target, path_meant(path) or EXAMPLES))
    return CaptureSource(str(path), live=False)  # FFmpeg does not read `~`


VIDEO_SITES = {"youtube.com", "www.youtube.com", "m.youtube.com", "youtu.be", "music.youtube.com"}


def check_not_a_video_page(target: str) -> None:
    """A YouTube address (Ultralytics' `source=https://youtu.be/...` fetches the video behind it) is a web page, and
    the video's own address is found by yt-dlp: said before the page is fetched and read as a broken snapshot."""
    host = (urlsplit(target).hostname or "").lower()
    if host in VIDEO_SITES:
        raise SourceError(
            f"{mask_url(target)} is a YouTube page, not a video stream: give the video's own address, which "
            f"`yt-dlp -g -f 'best[height<=720]' '{mask_url(target)}'` prints (it expires after some hours; a live "
            "stream's is an .m3u8 that keeps playing)"
        )


def _lower_scheme(target: str) -> str:
    """`RTSP://cam/live`, as some camera apps print it: a URL's scheme is read in any case, and FFmpeg's is not."""
    scheme, sep, rest = target.partition("://")
    return f"{scheme.lower()}{sep}{rest}" if sep and scheme.isalpha() else target


EXAMPLES = "examples: 0, /dev/video0, video.mp4, rtsp://host/stream, ./images/"


def _with_address_meant(message: str, target: str, otherwise: str = "") -> str:
    """The message with the address `target` most likely means; its password masked in both, though a mistyped
    scheme hides it from the URL parser."""
    meant = _address_meant(target)
    if meant is None:
        return f"{message}; {otherwise}" if otherwise else message
    return mask_in(f"{message} (did you mean {meant}?)", meant)


def _address_meant(target: str) -> str | None:
    """A stream address with its scheme mistyped (`rstp://`, `rtsp:/`, `rtsp//`) or left out (`192.168.1.5:554/live`):
    the address it most likely means; None when it does not look like one."""
    schemes = [scheme.removesuffix("://") for scheme in STREAM_SCHEMES]
    typed = TYPED_SCHEME.match(target)
    scheme, rest = (typed.group(1).lower(), target[typed.end() :]) if typed else ("", "")
    if scheme in schemes:  # one slash, or the colon left out (a whole `rtsp://` never comes here)
        return f"{scheme}://{rest}"
    if scheme and "://" in target:
        near = difflib.get_close_matches(scheme, schemes, n=1, cutoff=0.6)
        return f"{near[0]}://{rest}" if near else None
    if HOST_AND_PORT.match(target):
        return f"rtsp://{target}"  # host:port/path: a camera's RTSP address without its scheme
    return None


def check_password_encoding(target: str) -> None:
    """A password holding '/', '?' or '#' as they are ends the address early: FFmpeg would connect to a host named
    after the user and, before masking knew better, log the rest. Percent-encoded they work (FFmpeg decodes them)."""
    advice = password_encoding_advice(target)
    if advice:
        raise SourceError(f"stream {mask_url(target)}: {advice} (the camera still gets the password as it is)")


def network_reason(target: str, timeout_s: float = 2.0) -> str:
    """Why a network stream gave no video, from one TCP connection to its host (FFmpeg's own words are kept out
    of the log): no such name, nothing listening, no answer, or a server that answered but sent no video."""
    generic = "check the address, credentials and network, and that it is live"
    parts = urlsplit(target)
    try:
        port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return f"its port is not a number; {generic}"
    host = parts.hostname
    if not host or port is None or parts.scheme not in DEFAULT_PORTS:  # udp://, srt://: no connection to try
        return generic
    where = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        return connection_failure(exc, host, port, timeout_s, "the camera is on")
    return f"{where} answers but sent no video: check the stream's path and the credentials, and that it streams"


def describe_error(exc: BaseException, source: FrameSource) -> str:
    """An exception's text with the source's credentials masked."""
    return mask_in(str(exc) or type(exc).__name__, source.target)
