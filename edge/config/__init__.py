"""The service's configuration: one stream from flags, or several from a YAML file (or a Frigate config).

A package as Frigate's `frigate/config/` is: `base` (the model every section derives from, which refuses unknown
keys), one module per domain (`stream`, `scene`, `frames`, `service`), reading a file (`loading`) with what it
needs beside (`env`: `${NAME}`; `paths`: relative paths; `frigate`: a Frigate config; `messages`: one line per
mistake). Its public names are importable from here. The process's `EDGE_*` settings stay in `edge/settings.py`:
every command reads them before any config, and they must not cost the config's imports.

It may import `edge.settings`, `edge.errors`, `backends` (engine names and their options) and `models` (the registry,
labels); nothing else of `edge` (the runtime reads the config, never the other way).
"""

from edge_inference.edge.config.base import (
    ConfigError,
    ConfigModel,
    Point,
    are_fractions,
    checked_points,
    listed_by_key,
)
from edge_inference.edge.config.frames import FFmpegConfig, MotionConfig, RegionsConfig
from edge_inference.edge.config.loading import anchored_paths, load_config, single_stream_config
from edge_inference.edge.config.scene import EventsConfig, LineConfig, TrackingConfig, ZoneConfig
from edge_inference.edge.config.service import (
    LOOPBACK,
    MIN_TOKEN_LENGTH,
    DetectorsConfig,
    MqttConfig,
    ServerConfig,
    ServiceConfig,
    StorageConfig,
    WebhookConfig,
)
from edge_inference.edge.config.stream import MAX_THREADS, StreamConfig, classes_from_text, compare_member_ids, compared

__all__ = [
    "LOOPBACK",
    "MAX_THREADS",
    "MIN_TOKEN_LENGTH",
    "ConfigError",
    "ConfigModel",
    "DetectorsConfig",
    "EventsConfig",
    "FFmpegConfig",
    "LineConfig",
    "MotionConfig",
    "MqttConfig",
    "Point",
    "RegionsConfig",
    "ServerConfig",
    "ServiceConfig",
    "StorageConfig",
    "StreamConfig",
    "TrackingConfig",
    "WebhookConfig",
    "ZoneConfig",
    "anchored_paths",
    "are_fractions",
    "checked_points",
    "classes_from_text",
    "compare_member_ids",
    "compared",
    "listed_by_key",
    "load_config",
    "single_stream_config",
]
