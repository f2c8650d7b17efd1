"""User corrections to an auto-detected model description: a sidecar YAML next to the model, or CLI flags."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from edge_inference.models.errors import ModelError


class SpecOverrides(BaseModel):
    """Every field is optional; what is given wins over what was detected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decoder: str | None = None
    width: int | None = Field(default=None, gt=0)
    height: int | None = Field(default=None, gt=0)
    layout: Literal["NCHW", "NHWC"] | None = None
    color: Literal["RGB", "BGR"] | None = None
    resize: Literal["letterbox", "stretch"] | None = None
    anchor: Literal["center", "top-left"] | None = None
    pad_value: int | None = Field(default=None, ge=0, le=255)
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    labels: str | None = None  # path to a label file, relative to the sidecar
    boxes_normalized: bool | None = None
    strides: tuple[int, ...] | None = None
    reg_max: int | None = Field(default=None, gt=0)

    def merged(self, other: SpecOverrides) -> SpecOverrides:
        """`other`'s fields win where set."""
        return self.model_copy(update=other.model_dump(exclude_none=True))


def sidecar_path(model_path: Path) -> Path | None:
    """`model.onnx.yaml` or `model.yaml` beside the model, whichever exists."""
    for candidate in (model_path.with_name(model_path.name + ".yaml"), model_path.with_suffix(".yaml")):
        if candidate.is_file():
            return candidate
    return None


def load_sidecar(path: Path) -> SpecOverrides:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ModelError(f"cannot read model sidecar {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ModelError(f"model sidecar {path} must be a mapping of settings, e.g. 'decoder: yolox'")
    try:
        overrides = SpecOverrides.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'file'}: {e['msg']}" for e in exc.errors())
        raise ModelError(f"model sidecar {path} is invalid: {problems}") from None
    if overrides.labels and not Path(overrides.labels).is_absolute():
        overrides = overrides.model_copy(update={"labels": str(path.parent / overrides.labels)})
    return overrides
