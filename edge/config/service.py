"""The service around the streams: the HTTP server, shared engines, event storage, MQTT and webhooks."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, SecretStr, field_validator, model_validator

from edge_inference.backends import engine_keys
from edge_inference.edge.config.base import ConfigModel, listed_by_key
from edge_inference.edge.config.messages import NAME
from edge_inference.edge.config.stream import StreamConfig, compare_member_ids

LOOPBACK = "127.0.0.1"
MIN_TOKEN_LENGTH = 8


class ServerConfig(ConfigModel):
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
    # The HTTP parser: httptools (C; auto where installed) or h11 (pure Python). Every clock and cap holds with either.
    http: Literal["auto", "httptools", "h11"] = "auto"
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


class StorageConfig(ConfigModel):
    """Where events and their snapshots are kept (this setting, else EDGE_DATA_DIR: the file wins, as for the
    server's host and port), and for how long."""

    data_dir: Path | None = None  # default: ~/.local/share/edge-inference
    max_age_days: float = Field(default=30, gt=0)  # events older than this are deleted
    max_events: int = Field(default=20_000, ge=10)  # the most events kept; oldest deleted beyond
    max_snapshot_mb: float = Field(default=500, gt=0)  # oldest snapshots are deleted beyond this
    max_outbox: int = Field(default=50_000, ge=100)  # undelivered messages kept per destination; oldest dropped
    min_free_mb: float = Field(default=200, ge=0)  # below this free on the data folder's disk, oldest snapshots go
    required: bool = False  # true: refuse to start when events cannot be stored (default: detect, report it)


class MqttConfig(ConfigModel):
    """A broker: `url` is mqtt://[user:pass@]host[:1883] or mqtts://...:8883 (EDGE_MQTT_URL wins)."""

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


class WebhookConfig(ConfigModel):
    """Each event change is POSTed as JSON to `url`, retried until it is accepted (2xx)."""

    url: SecretStr  # the receiver; its path (often a secret) is never shown
    timeout_s: float = Field(default=10, gt=0)  # a POST that takes longer has failed and is retried

    @field_validator("url")
    @classmethod
    def _http_only(cls, url: SecretStr) -> SecretStr:
        if not url.get_secret_value().startswith(("http://", "https://")):
            raise ValueError("a webhook URL starts with http:// or https://")
        return url


class SinkEntry(ConfigModel):
    """One more destination of every event change: `{type: <kind>, ...}`, its settings read by that kind's own model
    (`edge/events/sink.py`) when the service builds it."""

    model_config = ConfigDict(extra="allow", frozen=True)
    type: str  # the kind: webhook, or one an installed module declares

    def settings(self) -> dict[str, Any]:
        """Its settings, as written, without `type`."""
        return dict(self.model_extra or {})


class DetectorsConfig(ConfigModel):
    """How loaded engines are shared between streams (edge/detection/detector_pool.py)."""

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

        unknown = sorted(set(isolation) - set(engine_keys()))
        if unknown:
            raise ValueError(f"{', '.join(unknown)} is no engine: choose from {', '.join(engine_keys())}")
        return isolation


class ServiceConfig(ConfigModel):
    server: ServerConfig = ServerConfig()  # the HTTP service: address, access, client limits
    detectors: DetectorsConfig = DetectorsConfig()  # how streams share loaded engines
    streams: list[StreamConfig] = Field(min_length=1)  # the cameras (a list, or Frigate's mapping of id to settings)
    storage: StorageConfig = StorageConfig()  # where events are kept
    mqtt: MqttConfig | None = None  # a broker for events and Home Assistant; off: none
    webhooks: list[WebhookConfig] = Field(default_factory=list)  # URLs each event change is POSTed to
    sinks: list[SinkEntry] = Field(default_factory=list)  # more destinations of every event change, by type
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
