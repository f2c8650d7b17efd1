"""Where event changes go: every destination is an `EventSink`, and the layer, the outbox, the stats and
`edge serve --check` treat them as one list (as Roboflow's `multi_sink`: each failure logged, the outbox and its
retries shared).

A new kind of destination is one module: `edge/events/<kind>_sink.py` (or a distribution's entry point in the
`edge_inference.sinks` group) declaring `SINK = SinkKind(type, options, build)`; a config names it in `sinks:` as
`{type: <kind>, ...its options}`. Nothing else changes: the layer gives it an outbox sender, `/api/v1/stats` its
counts, health its problem, `serve --check` its check.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from edge_inference.backends.declared import declared
from edge_inference.edge.config import ConfigError, ServiceConfig
from edge_inference.edge.events.storage import Level
from edge_inference.edge.events.store import Message

ENTRY_POINT_GROUP = "edge_inference.sinks"


class EventSink(Protocol):
    """One destination of every event change."""

    sink: str  # the outbox's name for it, unique: "mqtt", "webhook:0", "<kind>:<n>"
    name: str  # how findings name it: "mqtt", "webhook 0"
    topic: str  # what its stored messages are addressed to (an MQTT topic; "event" for the others)
    rejected: int  # messages the destination refused for good, dropped from the outbox
    last_error: str | None  # the last trouble it met, None once it takes messages again

    def deliver(self, messages: list[Message]) -> int:
        """Send in order; how many, from the first, the destination confirmed (or refused for good)."""
        ...

    @property
    def problem(self) -> str | None:
        """What the user relies on that does not work now (health's `problems`); None when it takes events."""
        ...

    def check(self) -> tuple[str, Level]:
        """`edge serve --check`: whether it would take events, found without sending one."""
        ...

    def when_back(self, wake: Callable[[], None]) -> None:
        """Call `wake` when the destination comes back (a broker reconnecting); a sink that cannot tell ignores it."""
        ...


@dataclass(frozen=True)
class SinkKind:
    key: str  # `type:` in a `sinks:` entry
    options: type[BaseModel]  # its settings, refusing keys it does not know
    build: Callable[[Any, int], EventSink]  # (its options, its index among the sinks of this type) -> the sink


@functools.cache
def sink_kinds() -> dict[str, SinkKind]:
    """Every kind declared beside this module (`*_sink.py`) and by installed plugins, by type."""
    found: dict[str, SinkKind] = {}
    for kind in declared(__package__ or "", Path(__file__).parent, "_sink", "SINK", SinkKind, ENTRY_POINT_GROUP):
        found.setdefault(kind.key, kind)  # a plugin never replaces a built-in kind of its type
    return found


def configured_sinks(config: ServiceConfig) -> list[EventSink]:
    """The config's `sinks:` (and its `webhooks:`, the older spelling of `{type: webhook}`), each parsed by its
    kind's options; a mistake is one line naming the entry and what to write."""
    kinds = sink_kinds()
    chosen: list[tuple[SinkKind, Any]] = [(kinds["webhook"], hook) for hook in config.webhooks]
    for position, entry in enumerate(config.sinks):
        kind = kinds.get(entry.type)
        if kind is None:
            choices = ", ".join(sorted(kinds))
            raise ConfigError(f"sinks[{position}]: no sink is of type {entry.type!r}: choose from {choices}")
        try:
            chosen.append((kind, kind.options.model_validate(entry.settings())))
        except ValidationError as exc:
            raise ConfigError(f"sinks[{position}] ({kind.key}): {_first_error(exc)}") from None
    sinks: list[EventSink] = []
    counts: dict[str, int] = {}
    for kind, options in chosen:
        sinks.append(kind.build(options, counts.get(kind.key, 0)))
        counts[kind.key] = counts.get(kind.key, 0) + 1
    return sinks


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else str(error["msg"])
