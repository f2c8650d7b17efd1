"""Which frames reach the detector and how they are decoded: motion gating, FFmpeg's decoding."""

from __future__ import annotations

from pydantic import Field, field_validator

from edge_inference.edge.config.base import ConfigModel, Point, checked_points


class MotionConfig(ConfigModel):
    """Motion gating (edge/stream/motion.py): the detector runs on frames where something moved."""

    threshold: float = Field(default=0.002, gt=0, le=1)  # share of the frame that must change
    pixel_threshold: int = Field(default=25, ge=1, le=255)  # grey-level change that counts as a changed pixel
    ignore: list[list[Point]] = Field(default_factory=list)  # polygons where changes never count (a clock overlay)
    recheck_s: float = Field(default=1.0, gt=0)  # while objects are in view: detect at least this often
    # Objects that stay put (parked cars) are rechecked less and less often, up to this interval (Frigate's
    # stationary objects); any motion, or objects that moved or changed, bring it back to recheck_s
    stationary_max_s: float = Field(default=30.0, gt=0)
    max_idle_s: float = Field(default=10.0, gt=0)  # on a still, empty scene: detect at least this often

    @field_validator("ignore")
    @classmethod
    def _in_one_unit(cls, polygons: list[list[Point]]) -> list[list[Point]]:
        return [checked_points(polygon, "region") for polygon in polygons]


class FFmpegConfig(ConfigModel):
    """Decode with the `ffmpeg` program (edge/stream/ffmpeg.py): on the hardware a preset names, scaled inside
    FFmpeg to the stream's `width`/`height` (set them near the model's input size, e.g. width: 416)."""

    # A preset (preset-rpi-64-h264, preset-vaapi, preset-intel-qsv-h264, preset-nvidia, ...), FFmpeg's own
    # arguments (a string or a list), or none: software decoding
    hwaccel: str | list[str] | None = None
    # A preset (preset-rtsp-generic, preset-rtsp-udp, preset-http-generic) or arguments; default: by the URL
    input_args: str | list[str] | None = None
