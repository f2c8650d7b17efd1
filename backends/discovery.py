"""Which engines are installed, which devices they see, and the best one for a model file (`--backend auto`).

Every figure comes from the engines' own declarations (backends/engine.py): nothing here names an engine.
"""

from __future__ import annotations

from pathlib import Path

from edge_inference.backends.engine import BackendStatus, Choice, choose, engines


def probe_all() -> list[BackendStatus]:
    return [engine.probe() for engine in engines().values()]


def choose_backend(path: Path) -> Choice:
    return choose(path)


__all__ = ["BackendStatus", "Choice", "choose_backend", "probe_all"]
