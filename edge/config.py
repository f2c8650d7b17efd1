"""The service's configuration: one stream from flags, or several from a YAML file."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from edge_inference.backends import BackendError, engine_keys
from edge_inference.backends.engine import check_engine_options, serving_engine
from edge_inference.backends.names import backend_named
from edge_inference.edge.config_env import EnvironmentReferenceError, filled_from_environment
from edge_inference.edge.config_frigate import frigate_camera, from_frigate_file, is_frigate_file, points_from_text
from edge_inference.edge.config_messages import (
    NAME,
    OWN_KEYS,
    ConfigShapeError,
    explain,
    load_yaml,
    read_config_bytes,
    unreadable_text,
    yaml_problem,
)
from edge_inference.edge.config_paths import anchored_model, anchored_path, anchored_source, path_meant
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import get_settings
from edge_inference.models.labels import label_key
from edge_inference.models.registry import DEFAULT_MODEL

LOOPBACK = "127.0.0.1"
MIN_TOKEN_LENGTH = 8
# More engine threads than this only costs memory and switching (a million of them: 40 MB/s of RSS, and nothing
# ever loads); the bound follows the machine the config is read on.
MAX_THREADS = max(8, 4 * (os.cpu_count() or 1))


def _engine_named(name: str, auto: bool = False) -> str:
    try:
        return backend_named(name, ["auto", *engine_keys()] if auto else engine_keys())
    except BackendError as exc:
        raise ValueError(str(exc)) from None


class ConfigError(EdgeError):
    pass


Point = tuple[float, float]


def are_fractions(points: list[Point]) -> bool:
    """Points in 0..1 of the frame, every coordinate of them; otherwise they are pixels."""
    return all(0 <= value <= 1 for point in points for value in point)


def _checked_points(points: list[Point], kind: str) -> list[Point]:
    """Points are 0..1 of the frame only when every coordinate is; one typed past 1 ((1.2, 0.5) among fractions)
    made them all pixels, a shape a pixel or two across that nothing ever enters or crosses."""
    if are_fractions(points):
        return points
    xs, ys = [x for x, _ in points], [y for _, y in points]
    width, height = max(xs) - min(xs), max(ys) - min(ys)
    length = math.hypot(width, height)
    if (kind != "line" and min(width, height) < 2) or (kind == "line" and length < 2):
        x, y = next(point for point in points if not are_fractions([point]))
        size = f"{width:g}x{height:g} pixels across" if kind != "line" else f"{length:.3g} pixels long"
        raise ValueError(
            f"({x:g}, {y:g}) is not in 0..1, so the {kind}'s points are read as pixels: a {kind} {size}; keep every "
            "coordinate in 0..1 of the frame, or write them all in pixels"
        )
    return points


def listed_by_key(items: Any, key: str, what: str) -> Any:
    """A mapping of name to settings (Frigate writes cameras and zones so) as the list of settings this config
    takes, each with its name under `key`; anything else as it is."""
    if not isinstance(items, dict) or not all(isinstance(v, dict | None) for v in items.values()):
        return items
    listed = []
    for name, settings in items.items():
        given = (settings or {}).get(key, name)
        if given != name:
            raise ValueError(f"{name} has {key}: {given}; leave {key} out where the key names the {what}")
        listed.append({**(settings or {}), key: str(name)})
    return listed


class ZoneConfig(BaseModel):
    """A polygon: points in pixels, or all in 0..1 of the frame. An object is in it when its bottom centre is."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME)  # the zone's name in stats, topics and events
    polygon: list[Point] = Field(min_length=3)  # [[x, y], ...] or Frigate's `x1,y1,x2,y2,...`

    @model_validator(mode="before")
    @classmethod
    def _frigate_form(cls, zone: Any) -> Any:
        """Frigate's `coordinates: 0.1,0.2,0.5,0.2,...` (a zone pasted from its config) is the polygon."""
        if isinstance(zone, dict) and "coordinates" in zone and "polygon" not in zone:
            zone = {("polygon" if key == "coordinates" else key): value for key, value in zone.items()}
        return zone

    @field_validator("polygon", mode="before")
    @classmethod
    def _pairs(cls, polygon: Any) -> Any:
        return points_from_text(polygon)

    @field_validator("polygon")
    @classmethod
    def _in_one_unit(cls, polygon: list[Point]) -> list[Point]:
        return _checked_points(polygon, "zone")


class LineConfig(BaseModel):
    """A line from `start` to `end` (pixels, or 0..1 of the frame); crossings are counted in each direction:
    `in` is from the line's right-hand side to its left, looking from start to end (supervision's convention)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME)  # the line's name in stats and topics
    start: Point  # [x, y]
    end: Point  # [x, y]

    @model_validator(mode="after")
    def _in_one_unit(self) -> LineConfig:
        _checked_points([self.start, self.end], "line")
        return self


class TrackingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    labels: list[str] = Field(default_factory=lambda: ["person"])  # tracked labels; [] tracks every label
    lost_after_s: float = Field(default=2.0, gt=0)  # how long a track survives without a detection


class MotionConfig(BaseModel):
    """Motion gating (edge/stream/motion.py): the detector runs on frames where something moved."""

    model_config = ConfigDict(extra="forbid")

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
        return [_checked_points(polygon, "region") for polygon in polygons]


class FFmpegConfig(BaseModel):
    """Decode with the `ffmpeg` program (edge/stream/ffmpeg.py): on the hardware a preset names, scaled inside
    FFmpeg to the stream's `width`/`height` (set them near the model's input size, e.g. width: 416)."""

    model_config = ConfigDict(extra="forbid")

    # A preset (preset-rpi-64-h264, preset-vaapi, preset-intel-qsv-h264, preset-nvidia, ...), FFmpeg's own
    # arguments (a string or a list), or none: software decoding
    hwaccel: str | list[str] | None = None
    # A preset (preset-rtsp-generic, preset-rtsp-udp, preset-http-generic) or arguments; default: by the URL
    input_args: str | list[str] | None = None


class EventsConfig(BaseModel):
    """When a tracked object becomes an event: its label, a score and a number of frames, optionally in a zone."""

    model_config = ConfigDict(extra="forbid")

    labels: list[str] = Field(default_factory=lambda: ["person"])  # labels that make events (tracked too)
    zones: list[str] = Field(default_factory=list)  # only inside one of these zones; [] anywhere
    min_score: float = Field(default=0.5, ge=0, le=1)  # the least score a detection needs to count
    min_frames: int = Field(default=3, ge=1)  # detections before a tracked object becomes an event
    end_after_s: float = Field(default=3.0, gt=0)  # the event ends once its object is lost this long


def classes_from_text(values: Iterable[str]) -> list[str | int]:
    """`person, car,2` (and `classes=0&classes=2`) -> ["person", "car", 2, 0, 2]: a number is a class id, as
    Ultralytics' `classes=` takes it."""
    items = [item.strip() for value in values for item in value.split(",") if item.strip()]
    return [int(item) if item.isdigit() else item for item in items]


class StreamConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

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
    engine_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
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
    # Boxes to events: a tracker gives every detection a track_id; zones and lines count; events are stored.
    tracking: TrackingConfig | None = None
    zones: list[ZoneConfig] = Field(default_factory=list)  # polygons: objects in them counted, events limited
    lines: list[LineConfig] = Field(default_factory=list)  # crossings counted in each direction
    events: EventsConfig | None = None  # tracked objects become stored events (MQTT, webhooks); off: none
    # Run the detector only where something moves; `motion: {}` turns it on with the defaults. Off: every frame.
    motion: MotionConfig | None = None
    # Decode with the ffmpeg program instead of OpenCV: hardware decoding, frames scaled to width/height in FFmpeg
    ffmpeg: FFmpegConfig | None = None
    # An RTSP camera decoded by OpenCV: every this many seconds ffprobe is asked the size it sends now, since OpenCV
    # squeezes a new resolution into the one it opened at (edge/stream/capture.py, SizeWatch); 0: never
    resolution_check_s: float = Field(default=60, ge=0)
    # For a model of one's own, what its file does not say (as `edge detect --labels/--color`, or the model's
    # sidecar, which these win over): a label file (one name a line, or `id name`) and the input's colour order
    labels: Path | None = None
    color: Literal["RGB", "BGR"] | None = None  # the model input's colour order

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

    @field_validator("engine_options")
    @classmethod
    def _engine_options_fit(cls, blocks: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
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


class ServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = LOOPBACK  # the address to listen on (0.0.0.0: every interface; then a token is needed)
    port: int = Field(default=8080, ge=0, le=65535)  # the port to listen on
    # Access control. A token (here, in token_file, or EDGE_TOKEN / EDGE_TOKEN_FILE) protects every route but
    # /health/live. Listening beyond loopback without one makes a random token, printed in the start-up URL,
    # unless allow_no_token says that an open service is really wanted.
    token: SecretStr | None = None  # 8 characters or more (MIN_TOKEN_LENGTH)
    token_file: Path | None = None  # a file holding the token (a container's secret)
    allow_no_token: bool = False  # true: listen beyond loopback with no token at all
    metrics_public: bool = False  # true: /metrics answers a scraper without the token
    # Host header names accepted; default: the loopback names, or any name when listening beyond loopback.
    allowed_hosts: list[str] | None = None
    cors_origins: list[str] = Field(default_factory=list)  # cross-origin browser access: off unless listed
    # Ready is 503 until every stream delivers frames (strict) or only while nothing works at all (default).
    strict_ready: bool = False
    # Connections: all of them, streaming clients per stream, and the clocks that end idle or stuck ones.
    max_connections: int = Field(default=100, ge=4)
    # Streaming clients (SSE, WebSocket, MJPEG) per stream; then 503
    max_clients_per_stream: int = Field(default=16, ge=1)
    header_timeout_s: float = Field(default=10, gt=0)  # a request's header must arrive within this
    keep_alive_timeout_s: int = Field(default=5, ge=1)  # an idle keep-alive connection is closed after this
    send_timeout_s: float = Field(default=30, gt=0)  # a streaming client that takes nothing for this long is cut
    shutdown_timeout_s: int = Field(default=3, ge=1)  # on SIGTERM every stream and client ends within this
    # Uploads to /detect: body size, pixels from the header (checked before decoding), work in flight and queued.
    max_upload_mb: float = Field(default=20, gt=0)
    max_upload_megapixels: float = Field(default=50, gt=0)  # an image's pixels, read from its header before decoding
    upload_workers: int = Field(default=2, ge=1, le=64)  # uploads decoded and run at once
    upload_queue: int = Field(default=8, ge=0, le=1000)  # uploads waiting; beyond, 503 with Retry-After
    # Events buffered per client; a slow client loses its own oldest
    subscriber_buffer: int = Field(default=32, ge=1, le=10_000)
    # SSE/WebSocket writes per client per second; faster streams arrive in batches (every event is still sent).
    client_flush_hz: float = Field(default=30, gt=0, le=1000)

    @field_validator("token")
    @classmethod
    def _token_long_enough(cls, token: SecretStr | None) -> SecretStr | None:
        if token is not None and len(token.get_secret_value()) < MIN_TOKEN_LENGTH:
            raise ValueError(
                f"the token must be at least {MIN_TOKEN_LENGTH} characters long (this one has "
                f"{len(token.get_secret_value())}); make one with: python3 -c 'import secrets; "
                "print(secrets.token_urlsafe(24))'"
            )
        return token


class StorageConfig(BaseModel):
    """Where events and their snapshots are kept (this setting, else EDGE_DATA_DIR: the file wins, as for the
    server's host and port), and for how long."""

    model_config = ConfigDict(extra="forbid")

    data_dir: Path | None = None  # default: ~/.local/share/edge-inference
    max_age_days: float = Field(default=30, gt=0)  # events older than this are deleted
    max_events: int = Field(default=20_000, ge=10)  # the most events kept; oldest deleted beyond
    max_snapshot_mb: float = Field(default=500, gt=0)  # oldest snapshots are deleted beyond this
    max_outbox: int = Field(default=50_000, ge=100)  # undelivered messages kept per destination; oldest dropped
    min_free_mb: float = Field(default=200, ge=0)  # below this free on the data folder's disk, oldest snapshots go
    required: bool = False  # true: refuse to start when events cannot be stored (default: detect, report it)


class MqttConfig(BaseModel):
    """A broker: `url` is mqtt://[user:pass@]host[:1883] or mqtts://...:8883 (EDGE_MQTT_URL wins)."""

    model_config = ConfigDict(extra="forbid")

    url: SecretStr | None = None  # mqtt://[user:pass@]host[:1883] or mqtts://host[:8883]
    username: str | None = None  # when not in the URL
    password: SecretStr | None = None  # when not in the URL
    ca_file: Path | None = None  # mqtts: a private CA; default: the system's
    client_id: str | None = None  # default: edge-inference-<device_id>
    topic_prefix: str = "edge-inference"  # topics are <topic_prefix>/<device_id>/...
    device_id: str | None = Field(default=None, pattern=NAME)  # default: the host name; unique per device
    discovery: bool = True  # Home Assistant MQTT discovery
    discovery_prefix: str = "homeassistant"  # where Home Assistant listens for discovery
    stats_interval_s: float = Field(default=30, gt=0)  # how often the stats topic is published
    keepalive_s: int = Field(default=30, ge=5)  # MQTT keep-alive

    @field_validator("topic_prefix", "discovery_prefix")
    @classmethod
    def _a_topic_to_publish_to(cls, value: str) -> str:
        """MQTT forbids a NUL in any topic (the broker drops the connection of a client that sends one, and every
        message waited) and wildcards in a topic published to."""
        if not value:
            raise ValueError("must not be empty")
        if "\0" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            raise ValueError("holds a NUL (or a lone surrogate), which MQTT forbids in a topic: remove it")
        if "+" in value or "#" in value:
            raise ValueError("holds + or #, MQTT's wildcards, which a topic published to may not hold")
        return value

    @model_validator(mode="before")
    @classmethod
    def _frigate_form(cls, data: Any) -> Any:
        """Frigate's block as a Frigate user brings it: `host`, `port` and `user` are the url and username."""
        if not isinstance(data, dict) or not {"host", "port", "user"} & set(data):
            return data
        data = dict(data)
        host, port = data.pop("host", None), data.pop("port", None)
        if host is not None and data.get("url"):
            raise ValueError("give the broker once: url: mqtt://host:1883, or host: and port:, not both")
        if host is None and port is not None:
            raise ValueError("a port without a host: write host: 192.168.1.5 and port: 1883, or url: mqtt://host:1883")
        if host is not None:
            data["url"] = f"mqtt://{host}" + (f":{port}" if port is not None else "")
        if "user" in data:
            data["username"] = data.pop("user")
        return data


class WebhookConfig(BaseModel):
    """Each event change is POSTed as JSON to `url`, retried until it is accepted (2xx)."""

    model_config = ConfigDict(extra="forbid")

    url: SecretStr  # the receiver; its path (often a secret) is never shown
    timeout_s: float = Field(default=10, gt=0)  # a POST that takes longer has failed and is retried

    @field_validator("url")
    @classmethod
    def _http_only(cls, url: SecretStr) -> SecretStr:
        if not url.get_secret_value().startswith(("http://", "https://")):
            raise ValueError("a webhook URL starts with http:// or https://")
        return url


class DetectorsConfig(BaseModel):
    """How loaded engines are shared between streams (edge/detection/detector_pool.py)."""

    model_config = ConfigDict(extra="forbid")

    # Streams on the same model file, engine and device share one loaded engine, served in turn.
    share: bool = True
    # Frames of several streams waiting together run as one batch where the model's batch dimension is dynamic.
    # None of the registry's files has one (their exports fix the batch), so it is unmeasured here and off.
    max_batch: int = Field(default=1, ge=1, le=64)
    # Where each engine runs, for streams whose isolation is auto: {onnx: process, edgetpu: thread}
    isolation: dict[str, Literal["auto", "process", "thread"]] = Field(default_factory=dict)

    @field_validator("isolation")
    @classmethod
    def _engines_named(cls, isolation: dict[str, str]) -> dict[str, str]:
        from edge_inference.backends import engine_keys

        unknown = sorted(set(isolation) - set(engine_keys()))
        if unknown:
            raise ValueError(f"{', '.join(unknown)} is no engine: choose from {', '.join(engine_keys())}")
        return isolation


class ServiceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: ServerConfig = ServerConfig()  # the HTTP service: address, access, client limits
    detectors: DetectorsConfig = DetectorsConfig()  # how streams share loaded engines
    streams: list[StreamConfig] = Field(min_length=1)  # the cameras (a list, or Frigate's mapping of id to settings)
    storage: StorageConfig = StorageConfig()  # where events are kept
    mqtt: MqttConfig | None = None  # a broker for events and Home Assistant; off: none
    webhooks: list[WebhookConfig] = Field(default_factory=list)  # URLs each event change is POSTed to
    # What reading the file said beside it (a Frigate file: what was read as what, what was left out)
    _notes: list[str] = PrivateAttr(default_factory=list)

    @property
    def notes(self) -> list[str]:
        return self._notes

    @field_validator("mqtt", mode="before")
    @classmethod
    def _mqtt_switch(cls, mqtt: Any) -> Any:
        """Frigate's `enabled: false` turns the block off; `enabled: true` is what the block says anyway."""
        if isinstance(mqtt, dict) and "enabled" in mqtt:
            mqtt = dict(mqtt)
            if mqtt.pop("enabled") is False:
                return None
        return mqtt

    @field_validator("streams", mode="before")
    @classmethod
    def _streams_by_id(cls, streams: Any) -> Any:
        """`streams:` as a mapping of id to settings, as Frigate's `cameras:` is written, or as a list."""
        return listed_by_key(streams, "id", "stream")

    @field_validator("streams")
    @classmethod
    def _unique_ids(cls, streams: list[StreamConfig]) -> list[StreamConfig]:
        """Every pipeline's id (streams and compare members) is unique, or one would hide another in the API."""
        owners: dict[str, str] = {}
        for stream in streams:
            members = compare_member_ids(stream.id, stream.compare)
            duplicated = sorted({i for i in members if members.count(i) > 1})
            if duplicated:
                raise ValueError(f"stream {stream.id} compares the same backend twice: {', '.join(duplicated)}")
            for pipeline_id in members or [stream.id]:
                what = f"a compare member of {stream.id}" if stream.compare else "a stream"
                if pipeline_id in owners:
                    raise ValueError(
                        f"the id {pipeline_id} is used twice ({owners[pipeline_id]} and {what}); rename one"
                    )
                owners[pipeline_id] = what
        return streams


def _parsed(path: Path) -> Any:
    """The config file's YAML, or a ConfigError saying why not: missing, unreadable, too large, not YAML."""
    raw = b""
    try:
        # bytes: PyYAML reads UTF-8 and, by their byte-order mark, UTF-16 files (Windows Notepad's "Unicode")
        raw = read_config_bytes(path)
        return load_yaml(raw)
    except ConfigShapeError as exc:
        raise ConfigError(f"config {path} {exc}") from None
    except FileNotFoundError:
        hint = "deploy/streams.example.yaml shows one"
        if get_settings().in_container:  # set by our image: the file is the user's to mount, wherever it points
            raise ConfigError(f"no config at {path}: mount yours: -v $PWD/streams.yaml:{path}:ro ({hint})") from None
        raise ConfigError(f"no config at {path}: {path_meant(path) or hint}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except yaml.reader.ReaderError as exc:
        raise ConfigError(f"config {path} {unreadable_text(exc, raw)}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path} is not valid YAML{yaml_problem(exc)}") from None


def load_config(path: Path | str) -> ServiceConfig:
    path = Path(path).expanduser()
    data = _parsed(path)
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must be a mapping with a 'streams:' list")
    data = {key: value for key, value in data.items() if not str(key).startswith(OWN_KEYS)}
    notes: list[str] = []
    frigate = is_frigate_file(data)
    try:
        if frigate:
            stream_keys = frozenset(StreamConfig.model_fields)
            data, notes = from_frigate_file(data, frozenset(ServiceConfig.model_fields), stream_keys)
        data = filled_from_environment(data)
    except EnvironmentReferenceError as exc:
        raise ConfigError(f"config {path}: {exc}") from None
    except ValueError as exc:  # a Frigate file's part that cannot be read here, named with its place
        raise ConfigError(f"config {path} is invalid: {exc}") from None
    try:
        config = ServiceConfig.model_validate(data)
    except ValidationError as exc:
        renamed = {"streams": "cameras"} if frigate else None  # the file's own words: its cameras are the streams
        raise ConfigError(f"config {path} is invalid: {explain(exc, ServiceConfig, data, renamed)}") from None
    config = anchored_paths(config, Path(os.path.abspath(path)).parent)
    config._notes = notes
    return config


def anchored_paths(config: ServiceConfig, folder: Path) -> ServiceConfig:
    """The config's relative paths read from its own folder (edge/config_paths.py)."""
    streams = [
        stream.model_copy(
            update={
                "source": anchored_source(stream.source, folder),
                "model": anchored_model(stream.model, folder),
                "labels": anchored_path(stream.labels, folder),
            }
        )
        for stream in config.streams
    ]
    server, storage, mqtt = config.server, config.storage, config.mqtt
    return config.model_copy(
        update={
            "streams": streams,
            "server": server.model_copy(update={"token_file": anchored_path(server.token_file, folder)}),
            "storage": storage.model_copy(update={"data_dir": anchored_path(storage.data_dir, folder)}),
            "mqtt": mqtt and mqtt.model_copy(update={"ca_file": anchored_path(mqtt.ca_file, folder)}),
        }
    )


def single_stream_config(stream: dict[str, object], server: dict[str, object]) -> ServiceConfig:
    try:
        return ServiceConfig(server=ServerConfig(**server), streams=[StreamConfig(**stream)])  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigError(f"invalid option: {explain(exc, ServiceConfig)}") from None
