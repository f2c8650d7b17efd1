"""A source decoded by the `ffmpeg` program: hardware decoding by preset, frames scaled inside FFmpeg.

OpenCV decodes every frame in software at the camera's full resolution and converts it to BGR there; the detector
then throws most of those pixels away. Here FFmpeg (Debian's, or a board vendor's build) decodes, on the hardware
where a preset names it (Frigate's preset names, so a Frigate user's `hwaccel_args` work unchanged), scales to the
size asked for, and writes YUV 4:2:0 frames to a pipe (half the bytes of BGR; the header of the yuv4mpegpipe
format carries the size, so nothing has to be probed first). BGR is made from the small frame here.

A preset is the decoder arguments and the scaling filter that keeps frames on the device until they are small.
The presets' arguments are checked against FFmpeg's own lists (`ffmpeg -hwaccels`, `-decoders`) by the tests.
"""

from __future__ import annotations

import collections
import contextlib
import io
import os
import re
import shutil
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import cv2
import numpy as np

from edge_inference.edge.secrets import mask_in
from edge_inference.edge.stream.images import file_trouble
from edge_inference.edge.stream.sources import (
    FrameSource,
    SourceError,
    SourceResized,
    check_password_encoding,
    is_camera,
    is_live,
)

FFMPEG = os.environ.get("EDGE_FFMPEG", "ffmpeg")
VAAPI_DEVICE = "/dev/dri/renderD128"
STDERR_LINES = 20  # the last lines FFmpeg wrote, for the message when it stops
HEADER_LIMIT = 256  # a yuv4mpegpipe header line is well under this


@dataclass(frozen=True)
class HwPreset:
    """A way of decoding on hardware: FFmpeg's arguments before the input, and the scaling on the device."""

    decode: tuple[str, ...]
    scale: str  # the filter chain to size WxH; {w} {h}; ends in system memory
    needs: str  # what FFmpeg must have: "hwaccel:<name>" (in -hwaccels) or "decoder:<name>" (in -decoders)
    device: str  # what must be present on the machine, for the message when it is not
    hint: str  # what to install or check


_SW_SCALE = "scale={w}:{h}"
PRESETS: dict[str, HwPreset] = {
    # Raspberry Pi 4 (and 3): the V4L2 memory-to-memory decoder; frames come to memory, scaled there
    "preset-rpi-64-h264": HwPreset(
        ("-c:v", "h264_v4l2m2m"), _SW_SCALE, "decoder:h264_v4l2m2m", "/dev/video10", "a Raspberry Pi 4 kernel"
    ),
    "preset-rpi-64-h265": HwPreset(
        ("-c:v", "hevc_v4l2m2m"), _SW_SCALE, "decoder:hevc_v4l2m2m", "/dev/video19", "a Raspberry Pi kernel"
    ),
    # Intel and AMD GPUs through VA-API; scaled on the GPU, downloaded small
    "preset-vaapi": HwPreset(
        ("-hwaccel", "vaapi", "-hwaccel_device", VAAPI_DEVICE, "-hwaccel_output_format", "vaapi"),
        "scale_vaapi=w={w}:h={h},hwdownload,format=nv12",
        "hwaccel:vaapi",
        VAAPI_DEVICE,
        "the VA-API driver (intel-media-va-driver or mesa-va-drivers) and this user in the 'render' group",
    ),
    "preset-intel-qsv-h264": HwPreset(
        ("-hwaccel", "qsv", "-qsv_device", VAAPI_DEVICE, "-hwaccel_output_format", "qsv", "-c:v", "h264_qsv"),
        "vpp_qsv=w={w}:h={h}:format=nv12,hwdownload,format=nv12",
        "decoder:h264_qsv",
        VAAPI_DEVICE,
        "an FFmpeg built with QSV (libvpl), intel-media-va-driver and this user in the 'render' group",
    ),
    "preset-intel-qsv-h265": HwPreset(
        ("-hwaccel", "qsv", "-qsv_device", VAAPI_DEVICE, "-hwaccel_output_format", "qsv", "-c:v", "hevc_qsv"),
        "vpp_qsv=w={w}:h={h}:format=nv12,hwdownload,format=nv12",
        "decoder:hevc_qsv",
        VAAPI_DEVICE,
        "an FFmpeg built with QSV (libvpl), intel-media-va-driver and this user in the 'render' group",
    ),
    # NVIDIA GPUs (NVDEC through CUDA); scaled on the GPU
    "preset-nvidia": HwPreset(
        ("-hwaccel", "cuda", "-hwaccel_device", "0", "-hwaccel_output_format", "cuda"),
        "scale_cuda=w={w}:h={h},hwdownload,format=nv12",
        "hwaccel:cuda",
        "/dev/nvidia0",
        "the NVIDIA driver (libcuda) and, in a container, the NVIDIA container toolkit",
    ),
    # Jetson: the jetson-ffmpeg build's NVMPI decoder, which scales while it decodes
    "preset-jetson-h264": HwPreset(
        ("-c:v", "h264_nvmpi"), "", "decoder:h264_nvmpi", "/dev/nvhost-nvdec", "an FFmpeg built with jetson-ffmpeg"
    ),
    "preset-jetson-h265": HwPreset(
        ("-c:v", "hevc_nvmpi"), "", "decoder:hevc_nvmpi", "/dev/nvhost-nvdec", "an FFmpeg built with jetson-ffmpeg"
    ),
}
INPUT_PRESETS: dict[str, tuple[str, ...]] = {
    # TCP for RTSP (no lost packets, so no smeared frames), a socket timeout so a silent camera ends in an error
    "preset-rtsp-generic": ("-rtsp_transport", "tcp", "-timeout", "10000000", "-fflags", "+genpts+discardcorrupt"),
    "preset-rtsp-udp": ("-rtsp_transport", "udp", "-timeout", "10000000", "-fflags", "+genpts+discardcorrupt"),
    "preset-http-generic": ("-rw_timeout", "10000000", "-fflags", "+genpts+discardcorrupt"),
}
# What FFmpeg prints when hardware it was told to use is missing (FFmpeg 4 to 7).
_HARDWARE_FAILURES = re.compile(
    r"device creation failed|failed to (open|initiali[sz]e|create)|no device available|cannot load|"
    r"no such file or directory|not supported|unknown decoder|decoder .* not found|hardware device setup failed|"
    r"could not (open|find|dynamically load)|no va display",
    re.IGNORECASE,
)


_CONTEXT = re.compile(r"^\[[^\]]+ @ 0x[0-9a-f]+\]\s*")  # FFmpeg's "[h264_v4l2m2m @ 0x55c1...] " prefix
_LEVEL = re.compile(r"^\[(panic|fatal|error|warning|info|verbose|debug|trace)\]\s*")  # `-loglevel level+...`
_KEPT_LEVELS = {"panic", "fatal", "error"}  # what the message on failure quotes, as `-loglevel error` printed
# The filter graph's input, printed each time the decoder's frames change size (FFmpeg 5 to 7):
# "[graph 0 input from stream 0:0 @ 0x...] [verbose] w:1280 h:720 pixfmt:yuv420p ..."
_INPUT_SIZE = re.compile(r"^\[graph \d+ input from stream [^\]]*\] \[verbose\] w:(\d+) h:(\d+) ")


class FFmpegError(SourceError):
    """FFmpeg is missing, or its arguments or hardware do not work here."""


@dataclass(frozen=True)
class FFmpegOffers:
    hwaccels: list[str]  # `ffmpeg -hwaccels`
    decoders: list[str]  # the video decoders of `ffmpeg -decoders`


def ffmpeg_offers(program: str = FFMPEG) -> FFmpegOffers:
    """What this FFmpeg build can do, from its own lists."""

    def listing(flag: str) -> str:
        try:
            run = subprocess.run([program, "-hide_banner", flag], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return run.stdout

    hwaccels = [line.strip() for line in listing("-hwaccels").splitlines()[1:] if line.strip()]
    decoders = [line.split()[1] for line in listing("-decoders").splitlines() if line.startswith(" V")]
    return FFmpegOffers(hwaccels, decoders)


def _args(value: str | list[str] | None, presets: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """A preset name, a string of arguments, or a list of them."""
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    if presets is not None and value in presets:
        return list(presets[value])
    return value.split()


def default_input_args(target: str) -> list[str]:
    if is_camera(target):  # FFmpeg guesses its v4l2 input from a /dev/video name only, not from /dev/v4l/by-id/...
        return ["-f", "v4l2"]
    if target.startswith(("rtsp://", "rtsps://")):
        return list(INPUT_PRESETS["preset-rtsp-generic"])
    if target.startswith(("http://", "https://")):
        return list(INPUT_PRESETS["preset-http-generic"])
    return []


@dataclass(frozen=True)
class FFmpegSettings:
    """What a stream's `ffmpeg:` block says: hardware preset or arguments, input arguments, output size and rate."""

    hwaccel: str | list[str] | None = None  # a preset name, or FFmpeg's own arguments
    input_args: str | list[str] | None = None  # a preset name or arguments; default by the URL's scheme
    width: int | None = None
    height: int | None = None
    fps: float | None = None
    live: bool = True

    @property
    def preset(self) -> HwPreset | None:
        return PRESETS.get(self.hwaccel) if isinstance(self.hwaccel, str) else None


def _scale_filter(settings: FFmpegSettings) -> list[str]:
    """The -vf chain: rate first (fewer frames to scale), then size on the device where the preset can."""
    filters = [f"fps={settings.fps:g}"] if settings.fps and settings.live else []
    if settings.width or settings.height:
        # -2 keeps the aspect ratio with an even size, as 4:2:0 needs
        w, h = settings.width or -2, settings.height or -2
        preset = settings.preset
        if preset is not None and preset.scale:
            filters.append(preset.scale.format(w=w, h=h))
        elif preset is None:
            filters.append(_SW_SCALE.format(w=w, h=h))
    return ["-vf", ",".join(filters)] if filters else []


def _jetson_resize(settings: FFmpegSettings) -> list[str]:
    preset = settings.preset
    if preset is None or preset.scale or not (settings.width and settings.height):
        return []
    return ["-resize", f"{settings.width}x{settings.height}"]


def command(target: str, settings: FFmpegSettings) -> list[str]:
    """The whole FFmpeg command line for this source."""
    hwaccel = list(settings.preset.decode) if settings.preset else _args(settings.hwaccel)
    inputs = _args(settings.input_args, INPUT_PRESETS) if settings.input_args else default_input_args(target)
    return [
        FFMPEG,
        "-hide_banner",
        "-nostdin",
        "-loglevel",
        "level+verbose",  # verbose for the decoder's size (a camera that changes resolution); errors kept
        *inputs,
        *hwaccel,
        *_jetson_resize(settings),
        "-i",
        target,
        "-an",
        "-sn",
        "-dn",
        *_scale_filter(settings),
        "-pix_fmt",
        "yuv420p",
        "-f",
        "yuv4mpegpipe",
        "-strict",
        "-1",  # yuv4mpegpipe refuses some colour ranges without it
        "pipe:1",
    ]


def parse_header(line: bytes) -> tuple[int, int, float | None]:
    """Width, height and frame rate from a yuv4mpegpipe stream header (`YUV4MPEG2 W768 H576 F25:1 ...`)."""
    fields = line.decode("ascii", "replace").split()
    if not fields or fields[0] != "YUV4MPEG2":
        raise ValueError(f"not a yuv4mpegpipe header: {line[:40]!r}")
    values = {f[0]: f[1:] for f in fields[1:] if f}
    colour = values.get("C", "420jpeg")
    if not colour.startswith("420"):
        raise ValueError(f"FFmpeg wrote {colour} frames, not 4:2:0")
    fps = None
    if "F" in values:
        num, _, den = values["F"].partition(":")
        fps = float(num) / float(den or 1) if float(den or 1) else None
    return int(values["W"]), int(values["H"]), fps


class FFmpegSource(FrameSource):
    """Frames from an `ffmpeg` child process reading a camera URL or a file."""

    def __init__(self, target: str, settings: FFmpegSettings) -> None:
        super().__init__(target)
        self.settings = settings
        self.live = settings.live
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._size = (0, 0)
        self._decoded: tuple[int, int] | None = None  # the decoder's frame size, as FFmpeg first said it
        self._resized: tuple[int, int] | None = None  # a later, different one
        self._fps: float | None = None
        self._drainer: threading.Thread | None = None
        self._buffer = bytearray()
        self._frame = np.empty((0, 0), np.uint8)

    def fresh(self) -> FFmpegSource:
        return FFmpegSource(self.target, self.settings)

    @property
    def fps(self) -> float | None:
        return self._fps if self._fps and 0 < self._fps < 1000 else None

    @property
    def size(self) -> tuple[int, int]:
        return self._size

    def open(self) -> None:
        self.close()
        if shutil.which(FFMPEG) is None:
            raise FFmpegError(
                f"{self.description}: the ffmpeg program is not installed (apt install ffmpeg), "
                "or remove the stream's ffmpeg block to decode with OpenCV"
            )
        self._stderr.clear()
        self._decoded = self._resized = None
        process = subprocess.Popen(
            command(self.target, self.settings),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C in the terminal reaches the service, which stops FFmpeg itself
        )
        self._process = process
        self._drainer = threading.Thread(target=self._drain, args=(process,), name="ffmpeg-stderr", daemon=True)
        self._drainer.start()
        assert process.stdout is not None
        header = process.stdout.readline(HEADER_LIMIT)
        if not header:
            raise self._failure("could not be opened")
        try:
            width, height, self._fps = parse_header(header)
        except (ValueError, KeyError) as exc:
            raise FFmpegError(f"{self.description}: unexpected output from ffmpeg ({exc})") from None
        self._size = (width, height)
        self._buffer = bytearray(width * height * 3 // 2)  # one 4:2:0 frame: Y, then U and V
        self._frame = np.frombuffer(self._buffer, np.uint8).reshape(height * 3 // 2, width)  # a view of it

    def _drain(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            line = raw.decode("utf-8", "replace").strip()
            size = _INPUT_SIZE.match(line)
            if size:
                self._saw_size((int(size[1]), int(size[2])))
                continue
            said = _CONTEXT.sub("", line)
            level = _LEVEL.match(said)
            if said and (level is None or level[1] in _KEPT_LEVELS):
                self._stderr.append(said[level.end() :] if level else said)

    def _saw_size(self, size: tuple[int, int]) -> None:
        if self._decoded is None:
            self._decoded = size
        elif size != self._decoded and self.live:
            self._resized = size  # a file's sizes are its own: only a camera is reopened for it

    def read(self) -> np.ndarray | None:
        process = self._process
        if process is None or process.stdout is None:
            raise SourceError(f"{self.description} is not open")
        marker = process.stdout.readline(HEADER_LIMIT)  # "FRAME" and optional parameters
        # into the same buffer every frame: the BGR image made from it is a new array, handed on
        pipe = cast(io.BufferedReader, process.stdout)  # what Popen gives for stdout=PIPE, bufsize -1
        filled = pipe.readinto(self._buffer) if marker.startswith(b"FRAME") else 0
        if filled == len(self._buffer):
            self._check_size()  # the size line comes before the frame it is about: this frame may be squeezed
            return cv2.cvtColor(self._frame, cv2.COLOR_YUV2BGR_I420)
        code = self._wait_exit(process)
        if not self.live and code == 0:
            return None  # a file that ended
        raise self._failure("stopped delivering frames")

    def _check_size(self) -> None:
        resized, decoded = self._resized, self._decoded
        if resized is not None and decoded is not None:
            raise SourceResized.between(self.description, decoded, resized)

    def _wait_exit(self, process: subprocess.Popen[bytes]) -> int | None:
        try:
            return process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return None

    def _failure(self, what: str) -> FFmpegError:
        """One line: what failed, FFmpeg's own reason, and for hardware decoding what to check."""
        process = self._process
        code = self._wait_exit(process) if process is not None else None
        if self._drainer is not None:
            self._drainer.join(timeout=1)  # FFmpeg's last words, written just before it exited
        lines = list(self._stderr)
        preset = self.settings.preset
        hardware = [line for line in lines if _HARDWARE_FAILURES.search(line)] if preset is not None else []
        if hardware and preset is not None:  # the first complaint names the missing piece; later ones echo it
            return FFmpegError(
                f"{self.description}: hardware decoding with {self.settings.hwaccel} failed here (ffmpeg says "
                f"{mask_in(hardware[0], self.target)!r}); it needs {preset.device} and {preset.hint}. "
                "Remove hwaccel to decode in software"
            )
        local_file = not self.live and not is_camera(self.target) and "://" not in self.target
        trouble = file_trouble(self.target) if local_file else None
        if trouble:  # a file gone, or sound only: FFmpeg's "Output file #0 does not contain any stream" says neither
            return FFmpegError(f"{self.description} {what}: {trouble}")
        reason = lines[-1] if lines else f"ffmpeg exited with status {code}" if code is not None else "no output"
        return FFmpegError(f"{self.description} {what}: ffmpeg says {mask_in(reason, self.target)!r}")

    def interrupt(self) -> None:
        """Ends a read blocked on the pipe from another thread (the watchdog's): FFmpeg is stopped."""
        if self._process is not None:
            _signal(self._process, signal.SIGKILL)

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        _signal(process, signal.SIGTERM)
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            _signal(process, signal.SIGKILL)
            process.wait()
        if self._drainer is not None:
            self._drainer.join(timeout=1)  # it reads FFmpeg's stderr to its end: closed under it, it would fail
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


def _signal(process: subprocess.Popen[bytes], number: int) -> None:
    """To FFmpeg's process group (its own session), unless it has ended already."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, number)


def ffmpeg_source(
    target: str,
    *,
    hwaccel: str | list[str] | None = None,
    input_args: str | list[str] | None = None,
    width: int | None = None,
    height: int | None = None,
    fps: float | None = None,
) -> FFmpegSource:
    """An FFmpeg source for what the user wrote; an unknown preset or a missing file is one line now."""
    target = target.strip()
    for value, known, what in ((hwaccel, PRESETS, "hwaccel"), (input_args, INPUT_PRESETS, "input_args")):
        if isinstance(value, str) and value.startswith("preset-") and value not in known:
            raise FFmpegError(f"unknown ffmpeg {what} preset {value!r}; choose one of: {', '.join(sorted(known))}")
    live = is_live(target)
    if live:
        check_password_encoding(target)
    if not live and not target.startswith("file://"):
        target = os.path.expanduser(target)  # the ffmpeg program is not started by a shell
        if not Path(target).exists():
            raise FFmpegError(f"source {target} is not a URL or an existing file")
    if target.isdigit():
        target = f"/dev/video{target}"  # FFmpeg reads cameras by device path (its v4l2 input)
    settings = FFmpegSettings(hwaccel, input_args, width, height, fps, live)
    return FFmpegSource(target, settings)
