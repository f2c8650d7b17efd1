"""Process-wide settings from EDGE_* environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EDGE_")

    # Where registry models are kept once pulled.
    model_cache: Path = Path.home() / ".cache" / "edge-inference" / "models"
    # A folder or URL laid out like the registry paths (onnx/..., tflite/...), for machines without internet.
    model_mirror: str | None = None


def get_settings() -> Settings:
    return Settings()
