"""edge-inference: real-time object detection on edge devices.

The one import name this distribution installs. Its parts keep their folders at the repository's top level
(``cli/``, ``service/``, ``edge/``, ``backends/``, ``models/``, see ARCHITECTURE.md); ``edge_inference/`` links to
them, so the wheel, an editable install and the tools all see one package, ``edge_inference``, and nothing else
lands in site-packages.
"""

import os
import sys

# OpenCV's decoders refuse images above this many pixels (its own default: 2**30). It is read once, when cv2 is
# first imported, so it is set here, before any part of the package imports cv2; raise it in the environment for
# max_upload_megapixels above 250. The upload path checks the header first; this holds where that cannot.
DECODER_MAX_PIXELS = 250_000_000
os.environ.setdefault("OPENCV_IO_MAX_IMAGE_PIXELS", str(DECODER_MAX_PIXELS))
# OpenCV holds one process-wide lock around every FFmpeg open unless told FFmpeg is thread-safe (it has been since
# 4.0; the wheels bundle a newer one): without this, one camera that accepts the connection and never answers keeps
# every other source, local files too, from opening for its whole open timeout.
os.environ.setdefault("OPENCV_FFMPEG_IS_THREAD_SAFE", "1")
# FFmpeg inside OpenCV writes every damaged block of a stream straight to the process's stderr ("[h264 @ 0x..] error
# while decoding MB ..."), unbounded, beside our logs: a camera with a lossy network fills the journal on a Pi's SD
# card. Quiet by default (-8, AV_LOG_QUIET); our own lines say when a source cannot be opened or stalls. Set it to
# 16 (errors) or 24 (warnings) to read FFmpeg's own words, printed on stdout with an [OPENCV:FFMPEG:NN] prefix.
os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
# ONNX Runtime's official wheels since 1.32 send usage telemetry from Linux too (Microsoft's 1DS: process, session
# and model events) and keep a device id in ~/.cache/Microsoft; where that home cannot be written (a service's own
# user) every command printed "Failed to persist telemetry device ID". A camera box sends nothing it was not asked
# to: opted out before any session starts (1.32 reads the first name, later releases the second); set either to 0
# to opt in.
for _name in ("ORT_DISABLE_TELEMETRY", "ORT_TELEMETRY_DISABLED"):
    os.environ.setdefault(_name, "1")
# OpenVINO sends a Google Analytics event at every `import openvino` (its model converter's telemetry, on unless a
# consent file says no), from a process it forks off a thread, and writes a client id under ~/intel; NNCF does the
# same. Neither has a switch in the environment: without the `openvino_telemetry` module both fall back to their
# own no-op stand-ins, so in our processes that module is never imported. OpenVINO's tools run as programs of
# their own keep the user's choice.
sys.modules.setdefault("openvino_telemetry", None)  # type: ignore[arg-type]


def __getattr__(name: str) -> str:
    """`__version__`, looked up when asked: importlib.metadata costs 60-80 ms of every command's start here."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("edge-inference")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0+unknown"
