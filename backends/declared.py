"""What a package's modules and installed distributions declare: engines (`ENGINE` in `backends/*_backend.py`, the
`edge_inference.engines` entry points) and event sinks (`SINK` in `edge/events/*_sink.py`, `edge_inference.sinks`)
are found the same way, so that a new one is one module."""

from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import entry_points
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def declared(package: str, folder: Path, suffix: str, attribute: str, kind: type[T], group: str) -> list[T]:
    """Each `attribute` of type `kind` in the modules of `package` whose names end in `suffix`, in name order, then
    each entry point of `group` that loads one."""
    found: list[T] = []
    for module in sorted(m.name for m in pkgutil.iter_modules([str(folder)]) if m.name.endswith(suffix)):
        value = getattr(importlib.import_module(f"{package}.{module}"), attribute, None)
        if isinstance(value, kind):
            found.append(value)
    for point in entry_points(group=group):
        value = point.load()
        if isinstance(value, kind):
            found.append(value)
    return found
