"""A stream: its source, model, engine and what it reports; compare items and their members' ids."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SerializeAsAny, ValidationInfo, field_validator, model_validator

from edge_inference.backends import BackendError, engine_keys
from edge_inference.backends.engine import check_engine_options, serving_engine
from edge_inference.backends.names import backend_named
from edge_inference.backends.options import EngineOptions
from edge_inference.edge.config.base import ConfigModel, listed_by_key
from edge_inference.edge.config.frames import FFmpegConfig, MotionConfig, RegionsConfig
from edge_inference.edge.config.frigate import frigate_camera
from edge_inference.edge.config.scene import EventsConfig, LineConfig, TrackingConfig, ZoneConfig
from edge_inference.models.decoders import DECODERS
from edge_inference.models.labels import label_key
from edge_inference.models.registry import DEFAULT_MODEL

# More engine threads than this only costs memory and switching (a million of them: 40 MB/s of RSS, and nothing
# ever loads); the bound follows the machine the config is read on.
MAX_THREADS = max(8, 4 * (os.cpu_count() or 1))


def _engine_named(name: str, auto: bool = False) -> str:
    try:
        return backend_named(name, ["auto", *engine_keys()] if auto else engine_keys())
    except BackendError as exc:
        raise ValueError(str(exc)) from None


def classes_from_text(values: Iterable[str]) -> list[str | int]:
    """`person, car,2` (and `classes=0&classes=2`) -> ["person", "car", 2, 0, 2]: a number is a class id, as
    Ultralytics' `classes=` takes it."""
    items = [item.strip() for value in values for item in value.split(",") if item.strip()]
    return [int(item) if item.isdigit() else item for item in items]


class StreamConfig(ConfigModel):
    @model_validator(mode="before")
    @classmethod
    def _frigate_form(cls, stream: Any) -> Any:
        return frigate_camera(stream)

    id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")  # the stream's name in URLs, topics and stats
    # A camera index or /dev/video*, rtsp:// or http(s):// URL, a video, an image, a folder or a glob
    source: str = Field(min_length=1)
    model: str = DEFAULT_MODEL  # a registry name, a model file, or a server's model (triton+grpc://HOST:PORT/NAME)
    backend: str = "auto"  # the engine (onnx, tflite, edgetpu, openvino, hailo, rknn, triton); auto: measured
    device: str = "auto"  # the engine's device (cpu, cuda, tensorrt, usb, GPU, NPU, ...); auto: the engine's pick
    fallback: bool = False  # run on the CPU, and say so, where the device asked for is missing
    # Engine threads; default: the usable cores shared among the engines (auto)
    threads: int | None = Field(default=None, gt=0)
    # Each engine's own settings, a block per engine: {onnx: {trt_fp16: false}, hailo: {scheduler: none}}
    engine_options: dict[str, SerializeAsAny[EngineOptions]] = Field(default_factory=dict)
    # Where its engine runs: a process of its own (a native crash or hang ends that process, not the service), or
    # the service's; auto: its own for accelerators and plugin engines, the service's for the CPU engines
    isolation: Literal["auto", "process", "thread"] = "auto"
    conf: float = Field(default=0.25, ge=0, le=1)  # the least score a detection is reported with
    # Non-maximum suppression's overlap: boxes of one class overlapping more are one
    iou: float = Field(default=0.45, ge=0, le=1)
    # Only these classes are reported (Ultralytics' `classes`, Frigate's `objects.track`): labels or class ids, or a
    # mapping of label to its own least score ({person: 0.5, car: 0.7}); empty: every class at `conf`
    classes: list[str | int] | dict[str | int, Annotated[float, Field(ge=0, le=1)]] = Field(default_factory=list)
    # live: newest frame only; file: every frame in order. Default: live for cameras and streams.
    mode: Literal["auto", "live", "file"] = "auto"
    pace: bool = True  # file mode: at the file's own fps
    loop: bool = False  # file mode: start again at the end
    width: int | None = Field(default=None, gt=0)  # cameras: requested resolution and rate
    height: int | None = Field(default=None, gt=0)  # cameras: requested resolution; ffmpeg: frames scaled to it
    fps: float | None = Field(default=None, gt=0)  # cameras: the rate asked for; images: shown at this rate
    # Live comparison: the same frames through each of these backends (backend or backend:device); each becomes
    # a stream "<id>-<backend>" ("<id>-<backend>-<device>" when one engine is compared on two devices); the first
    # one is the agreement reference.
    compare: list[str] = Field(default_factory=list)
    # Watchdogs. A source read (or open) that has not returned for this long is declared stalled and reopened;
    # default: 5 s, or 10 frame intervals for sources slower than 2 fps (opens get three times as long).
    stall_timeout_s: float | None = Field(default=None, gt=0)
    # An inference that has not returned for this long marks the detector stuck; it is reloaded (Frigate: 10 s).
    # On a slow device the limit is 10x what an inference normally takes there, when that is longer.
    inference_timeout_s: float = Field(default=10, gt=0)
    # An engine in a process of its own (an accelerator's) that has not loaded the model by then is killed and loaded
    # again with the usual backoff: a driver that hangs on a device would hold the stream in `loading` for ever.
    # Generous: a TensorRT engine's first build on a Jetson takes minutes.
    load_timeout_s: float = Field(default=900, gt=0)
    # Boxes to events: a tracker gives every detection a track_id; zones and lines count; events are stored.
    tracking: TrackingConfig | None = None
    zones: list[ZoneConfig] = Field(default_factory=list)  # polygons: objects in them counted, events limited
    lines: list[LineConfig] = Field(default_factory=list)  # crossings counted in each direction
    events: EventsConfig | None = None  # tracked objects become stored events (MQTT, webhooks); off: none
    # Run the detector only where something moves; `motion: {}` turns it on with the defaults. Off: every frame.
    motion: MotionConfig | None = None
    # Where in the frame the detector looks: full (the whole frame), tiles, or motion (regions around what moved and
    # what is tracked); `regions: tiles` alone takes the defaults. For cameras far bigger than the model's input.
    regions: RegionsConfig = Field(default_factory=RegionsConfig)
    # Decode with the ffmpeg program instead of OpenCV: hardware decoding, frames scaled to width/height in FFmpeg
    ffmpeg: FFmpegConfig | None = None
    # An RTSP camera decoded by OpenCV: every this many seconds ffprobe is asked the size it sends now, since OpenCV
    # squeezes a new resolution into the one it opened at (edge/stream/capture.py, SizeWatch); 0: never
    resolution_check_s: float = Field(default=60, ge=0)
    # For a model of one's own, what its file does not say (as `edge detect --labels/--color/--decoder/--resize`, or
    # the model's sidecar, which these win over): a label file (one name a line, or `id name`) and the input's colour
    # order
    labels: Path | None = None
    color: Literal["RGB", "BGR"] | None = None  # the model input's colour order
    # The output decoder where the layout is not recognised (yolox, yolov5, yolov8, yolo-end2end, ssd, nanodet, ...)
    decoder: str | None = None
    resize: Literal["letterbox", "stretch"] | None = None  # how a frame is fitted to the model's input

    @field_validator("decoder")
    @classmethod
    def _known_decoder(cls, decoder: str | None) -> str | None:
        if decoder is not None and decoder not in DECODERS:
            raise ValueError(f"decoder {decoder!r} is not one of {', '.join(DECODERS)}")
        return decoder

    @field_validator("color", mode="before")
    @classmethod
    def _color_any_case(cls, value: Any) -> Any:
        """`bgr`, as Frigate's `input_pixel_format` writes it."""
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("id", "source", mode="before")
    @classmethod
    def _number_as_text(cls, value: Any) -> Any:
        """`id: 1` (cameras numbered as a house numbers them) and `source: 0` (the camera index, as the examples
        write it) are YAML's numbers: read as the text they were written as."""
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("motion", "tracking", "events", mode="before")
    @classmethod
    def _switched(cls, value: Any) -> Any:
        """`motion: true`, as the --motion flag reads: the block with its defaults; `false`: off."""
        return {} if value is True else None if value is False else value

    @field_validator("classes", mode="before")
    @classmethod
    def _classes_as_text(cls, value: Any) -> Any:
        """`classes: person, car` (YAML's one string), as --classes takes it."""
        return classes_from_text([value]) if isinstance(value, str) else value

    @field_validator("threads", mode="before")
    @classmethod
    def _threads_auto(cls, value: Any) -> Any:
        """`threads: auto`, the default's name in `edge serve --help`: left to the thread budget."""
        return None if isinstance(value, str) and value.strip().lower() == "auto" else value

    @field_validator("backend", mode="before")
    @classmethod
    def _one_backend(cls, value: Any) -> Any:
        if isinstance(value, list):
            shown = ", ".join(map(str, value))
            raise ValueError(
                f"one backend a stream; to run the frames through several side by side, write compare: [{shown}] "
                "(or backend: auto, for the fastest one measured here)"
            )
        return value

    @field_validator("backend")
    @classmethod
    def _engine_key(cls, backend: str) -> str:
        """`ONNX`, `Auto`: the engine's key; `coral`, `tensorrt`: answered with how it is written here."""
        return _engine_named(backend, auto=True)

    @field_validator("compare")
    @classmethod
    def _compared_engines(cls, items: list[str]) -> list[str]:
        """Each item's engine named as written here, its device and model (`@NAME`) kept as given."""
        found = []
        for item in items:
            if serving_engine(item):
                found.append(item)
                continue
            head, at, model = item.partition("@")
            backend, colon, device = head.partition(":")
            found.append(_engine_named(backend) + colon + device + at + model)
        return found

    @field_validator("threads")
    @classmethod
    def _threads_this_machine_can_use(cls, threads: int | None) -> int | None:
        if threads is not None and threads > MAX_THREADS:
            raise ValueError(
                f"{threads} engine threads is more than this machine can use ({os.cpu_count()} cores): give at most "
                f"{MAX_THREADS}, or leave it out for the default share of the cores"
            )
        return threads

    @field_validator("engine_options", mode="before")
    @classmethod
    def _engine_options_typed(cls, blocks: Any) -> dict[str, EngineOptions]:
        """Each block parsed once, by its engine's own options model: what the engine's `load` receives."""
        try:
            return check_engine_options(blocks)
        except BackendError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("zones", "lines", mode="before")
    @classmethod
    def _by_name(cls, items: Any, info: ValidationInfo) -> Any:
        """Zones keyed by name, as Frigate writes them (and lines alike)."""
        return listed_by_key(items, "name", "zone" if info.field_name == "zones" else "line")

    @field_validator("zones", "lines")
    @classmethod
    def _names_once(cls, items: list[ZoneConfig] | list[LineConfig], info: ValidationInfo) -> list[Any]:
        """A name is a key in /stats, a metric label and a Home Assistant entity: two of one name hid each other."""
        names = [item.name for item in items]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            kind = "zone" if info.field_name == "zones" else "line"
            raise ValueError(f"{', '.join(twice)}: used for two {kind}s; give each {kind} a name of its own")
        return items

    @field_validator("events")
    @classmethod
    def _event_zones_exist(cls, events: EventsConfig | None, info: ValidationInfo) -> EventsConfig | None:
        known = {zone.name for zone in info.data.get("zones", [])}
        missing = [name for name in (events.zones if events else []) if name not in known]
        if missing:
            raise ValueError(f"events name zones that are not defined: {', '.join(missing)}")
        return events

    @property
    def tracked_labels(self) -> list[str]:
        """What the tracker follows: `tracking.labels` and every label `events` name (an event is a tracked object,
        so events for cars need cars tracked); [] is every label."""
        tracked = (self.tracking or TrackingConfig()).labels
        wanted = self.events.labels if self.events else []
        if not tracked or (self.events and not wanted):
            return []
        keys = {label_key(label) for label in tracked}
        return [*tracked, *(label for label in wanted if label_key(label) not in keys)]

    @property
    def class_scores(self) -> dict[str | int, float | None]:
        """`classes` as the detector takes it: each class with its own least score, or None for `conf`."""
        if isinstance(self.classes, dict):
            return dict(self.classes)
        return dict.fromkeys(self.classes)

    @property
    def named_labels(self) -> dict[str, list[str]]:
        """The labels the config names, by the setting that names them: checked against the model's once it loads."""
        named = {"classes": [str(c) for c in self.classes if not isinstance(c, int)]}
        named["tracking.labels"] = self.tracking.labels if self.tracking else []
        named["events.labels"] = self.events.labels if self.events else []
        return {setting: labels for setting, labels in named.items() if labels}

    @property
    def analysed(self) -> bool:
        """Tracking runs when asked for, and whenever zones, lines or events need it."""
        return bool(self.tracking or self.zones or self.lines or self.events)


def compared(item: str) -> tuple[str, str, str | None]:
    """A `compare:` item as (engine, device, model): `onnx`, `openvino:GPU`, `onnx@yolox-nano-int8` (that engine
    running another model on the same frames: a float model against its int8 conversion), or a model on a server
    (`triton+grpc://gpu:8001/yolox_nano`: its engine, the server's device, that model). None: the stream's model."""
    served = serving_engine(item)
    if served is not None:
        return served.key, "auto", item
    head, _, model = item.partition("@")
    backend, _, device = head.partition(":")
    return backend, device, model or None


def _member_suffix(item: str) -> str:
    """What tells apart two members on one engine: a server's model name (and version), a model, or the device."""
    _, device, model = compared(item)
    if model and serving_engine(item):
        which = "-".join(model.rstrip("/").split("/")[3:])  # NAME or NAME-VERSION
    else:
        which = "-".join(filter(None, (device, Path(model).stem if model else None))) or "auto"
    return re.sub(r"[^a-z0-9_-]+", "-", which.lower()).strip("-") or "auto"


def compare_member_ids(stream_id: str, items: list[str]) -> list[str]:
    """`<id>-<backend>` for each compared backend; `<id>-<backend>-<device or model>` (a server's: its model's
    name) when one engine appears twice."""
    backends = [compared(item)[0] for item in items]
    return [
        f"{stream_id}-{backend}-{_member_suffix(item)}" if backends.count(backend) > 1 else f"{stream_id}-{backend}"
        for item, backend in zip(items, backends, strict=True)
    ]
