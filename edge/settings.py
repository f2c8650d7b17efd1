"""Process-wide settings from EDGE_* environment variables."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from edge_inference.edge.errors import EdgeError

EMPTY_IS_UNSET = {"token", "token_file", "mqtt_url", "data_dir", "config", "host", "port"}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EDGE_")

    # Where registry models are kept once pulled.
    model_cache: Path = Path.home() / ".cache" / "edge-inference" / "models"
    # `--backend auto`'s measurements of the engines, per model, engine versions and machine
    # (edge/detection/auto/)
    auto_cache: Path = Path.home() / ".cache" / "edge-inference" / "auto-backend.json"
    # How long one engine may take to load and be timed before it loses (EDGE_AUTO_BUDGET_S)
    auto_budget_s: float = Field(default=120.0, gt=0)
    # The seconds of each of an engine's timed rounds (EDGE_AUTO_ROUND_S): longer for a slow model on a slow
    # board (a 300 ms model runs 3 frames in a 1 s round), shorter for a pick sooner
    auto_round_s: float = Field(default=1.0, gt=0, le=60)
    # How long the service runs before its own inference times become the figure its later ones are checked
    # against (EDGE_AUTO_SETTLE_S): streams starting, engines warming and auto's first measurement settle first
    auto_settle_s: float = Field(default=180.0, ge=0)
    # Vendors' conversion toolchains, each in a venv of its own (rknn-toolkit2 pins numpy and torch): made once here
    toolchains: Path = Path.home() / ".cache" / "edge-inference" / "toolchains"
    # A folder or URL laid out like the registry paths (onnx/..., tflite/...), for machines without internet.
    model_mirror: str | None = None
    # The service's API token (EDGE_TOKEN), or a file holding it (EDGE_TOKEN_FILE); a config file's own wins.
    token: SecretStr | None = None
    token_file: Path | None = None  # a file holding the token
    # Events: the broker (EDGE_MQTT_URL, e.g. mqtt://user:pass@host:1883) and the data folder (EDGE_DATA_DIR).
    mqtt_url: SecretStr | None = None
    data_dir: Path | None = None  # the events' data folder
    # `edge serve` in a container or a systemd unit: the config file, bind address and port. Flags win, then the
    # config file's own server.host / server.port, then these (EDGE_CONFIG, EDGE_HOST, EDGE_PORT).
    config: Path | None = None
    host: str | None = None  # the address to listen on
    port: int | None = Field(default=None, ge=0, le=65535)  # the port to listen on
    # Set by our image (EDGE_IN_CONTAINER): a missing config is the user's to mount, and the message says how.
    in_container: bool = False

    @field_validator("*", mode="before")
    @classmethod
    def _as_meant(cls, value: object, info: ValidationInfo) -> object:
        """Quotes around a value are not part of it: compose's list form (`- EDGE_TOKEN="..."`) and `docker run
        --env-file` pass them on, and the token, broker URL or data folder was read with them (a folder named `"`,
        a token no client sent). Empty is unset: EDGE_TOKEN= (from docker compose) means no token."""
        value = unquoted(value) if isinstance(value, str) else value
        return None if value == "" and info.field_name in EMPTY_IS_UNSET else value

    @field_validator("model_cache", "auto_cache", "token_file", "data_dir", "config")
    @classmethod
    def _home_expanded(cls, path: Path | None) -> Path | None:
        """`~` as a shell reads it: a systemd unit's Environment= and a compose file pass it on as written."""
        return None if path is None else path.expanduser()


def unquoted(value: str) -> str:
    """An environment variable's value without the quotes around it, which Compose's list form and `docker run
    --env-file` keep as part of it."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


# EDGE_* variables read outside the settings: debugging, hardware roots, program paths, the tests' media
OTHER_VARIABLES = {
    "EDGE_DEBUG", "EDGE_SYSROOT", "EDGE_FFMPEG", "EDGE_AUTO_MEASURE", "EDGE_LIBEDGETPU", "EDGE_SHARED_DIR",
}  # fmt: skip


def misspelled_variables(environ: Mapping[str, str]) -> list[str]:
    """`EDGE_MQTT_URI` in a compose file is read by nothing, and events never reach the broker: each EDGE_* name
    that is a near miss of one edge reads, with that name. Others are left alone (a config's own `${EDGE_CAM_PW}`)."""
    known = sorted({f"EDGE_{name.upper()}" for name in Settings.model_fields} | OTHER_VARIABLES)
    lines = []
    for name in sorted(environ):
        if name.startswith("EDGE_") and name not in known:
            near = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
            if near:
                lines.append(f"{name} is not read by edge: did you mean {near[0]}?")
    return lines


def get_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(f"EDGE_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors())
        raise EdgeError(f"an EDGE_* environment variable is invalid: {problems}") from None
