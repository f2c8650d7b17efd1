"""A config file read into a ServiceConfig (or one stream from flags), its relative paths read from its folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from edge_inference.edge.config.base import ConfigError
from edge_inference.edge.config.env import EnvironmentReferenceError, filled_from_environment
from edge_inference.edge.config.frigate import from_frigate_file, is_frigate_file
from edge_inference.edge.config.messages import (
    OWN_KEYS,
    ConfigShapeError,
    explain,
    load_yaml,
    read_config_bytes,
    unreadable_text,
    yaml_problem,
)
from edge_inference.edge.config.paths import anchored_model, anchored_path, anchored_source, path_meant
from edge_inference.edge.config.service import ServerConfig, ServiceConfig
from edge_inference.edge.config.stream import StreamConfig
from edge_inference.edge.settings import get_settings


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
    """The config's relative paths read from its own folder (paths.py)."""
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
