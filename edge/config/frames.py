"""Which frames reach the detector and how they are decoded: motion gating, FFmpeg's decoding."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from edge_inference.edge.config.base import ConfigModel, Point, checked_points
from edge_inference.models.tiles import DEFAULT_OVERLAP, Tiling, TilingError, parse_tiles


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


class RegionsConfig(ConfigModel):
    """Where in a frame the detector looks (models/tiles.py, models/regions.py). A frame far bigger than the
    model's input, letterboxed whole, shrinks the people that matter to a few pixels: tiles run it in overlapping
    parts at the model's own scale; motion runs only the parts around what moved and what is tracked."""

    # full: the whole frame letterboxed (the default); tiles: every frame as overlapping tiles, merged; motion: regions
    # at the model's scale around what moved and what is tracked, the whole frame as tiles now and then
    mode: Literal["full", "tiles", "motion"] = "full"
    tiles: str = "auto"  # the grid: auto (tiles the size the model was trained at, as few as cover it) or COLSxROWS
    overlap: float = Field(default=DEFAULT_OVERLAP, gt=0, le=0.5)  # the share of a tile its neighbour overlaps
    # motion: the whole frame, as tiles, at least this often, for what stopped before it was ever seen
    full_frame_s: float = Field(default=10.0, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _mode_alone(cls, value: Any) -> Any:
        """`regions: tiles`: the mode with its defaults; `none`/`off` as `full`."""
        if isinstance(value, str):
            value = {"mode": value}
        if isinstance(value, dict) and str(value.get("mode", "")).lower() in ("none", "off", "false"):
            value = {**value, "mode": "full"}
        return value

    @field_validator("tiles", mode="before")
    @classmethod
    def _as_written(cls, value: Any) -> Any:
        """YAML reads `tiles: 0x2` as the number 2 (hexadecimal): said back as the text it became."""
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("tiles")
    @classmethod
    def _a_grid(cls, text: str) -> str:
        try:
            parse_tiles(text)
        except TilingError as exc:
            raise ValueError(str(exc).replace("--tiles", "tiles:")) from None
        return text

    def tiling(self) -> Tiling:
        return parse_tiles(self.tiles, self.overlap)


class FFmpegConfig(ConfigModel):
    """Decode with the `ffmpeg` program (edge/stream/ffmpeg.py): on the hardware a preset names, scaled inside
    FFmpeg to the stream's `width`/`height` (set them near the model's input size, e.g. width: 416)."""

    # A preset (preset-rpi-64-h264, preset-vaapi, preset-intel-qsv-h264, preset-nvidia, ...), FFmpeg's own
    # arguments (a string or a list), or none: software decoding
    hwaccel: str | list[str] | None = None
    # A preset (preset-rtsp-generic, preset-rtsp-udp, preset-http-generic) or arguments; default: by the URL
    input_args: str | list[str] | None = None
