"""Each engine's own settings: a pydantic model declared in the engine's module, like Frigate's detector configs.

A stream carries them as `engine_options: {<engine>: {<key>: <value>}}` (a block per engine, so `auto` and `compare`
find theirs), the command line as `--engine-option <engine>.<key>=<value>`. A mistake is one line that names the
engine and its allowed keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar, get_args, get_origin

from pydantic import ValidationError

from edge_inference.backends.base import BackendError, EngineOptions

__all__ = ["EngineOptions", "Options", "allowed", "describe_options", "options_key", "parse_options"]


Options = TypeVar("Options", bound=EngineOptions)


def _type_name(annotation: Any) -> str:
    if get_origin(annotation) is dict:
        return "mapping"
    args = [a for a in get_args(annotation) if a is not type(None)]
    if args and all(isinstance(a, str) for a in args):  # a Literal's choices
        return " | ".join(args)
    if args:
        return " | ".join(_type_name(a) for a in args)
    return getattr(annotation, "__name__", str(annotation))


def describe_options(model: type[EngineOptions]) -> list[dict[str, Any]]:
    """Each option's name, type, default and meaning, for `edge backends`."""
    return [
        {
            "name": name,
            "type": _type_name(info.annotation),
            "default": info.get_default(call_default_factory=True),
            "help": info.description or "",
        }
        for name, info in model.model_fields.items()
    ]


def options_key(options: Mapping[str, Any] | EngineOptions) -> str:
    """Options as text that is the same for the same settings, typed or not: what they set beyond the defaults."""
    given = options.model_dump(mode="json", exclude_defaults=True) if isinstance(options, EngineOptions) else options
    return json.dumps(dict(given), sort_keys=True, default=str)


def allowed(model: type[EngineOptions]) -> str:
    names = list(model.model_fields)
    return f"allowed: {', '.join(names)}" if names else "it has no options"


def parse_options(engine: str, model: type[Options], raw: Mapping[str, Any] | EngineOptions) -> Options:
    """The engine's options from a config block or flags, or one line that says what is wrong and what is allowed.
    Options already typed (the config's, parsed once when it was read) are taken as they are."""
    if isinstance(raw, model):
        return raw
    if isinstance(raw, EngineOptions):  # a plugin engine handing its own options on to the engine it wraps
        raw = raw.model_dump(exclude_defaults=True)
    if not isinstance(raw, Mapping):
        raise BackendError(f"engine_options.{engine} must be a mapping of option: value ({allowed(model)})")
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(part) for part in error["loc"])
        if error["type"] == "extra_forbidden":
            problem = f"unknown option {key!r} for {engine}"
        else:
            problem = f"engine option {engine}.{key}: {error['msg'].lower()} (got {error.get('input')!r})"
        raise BackendError(f"{problem}; {allowed(model)}") from None
