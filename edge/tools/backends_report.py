"""The hardware/backends report shared by `edge backends` and GET /api/v1/backends."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from edge_inference.backends import engines
from edge_inference.backends.engine import BackendStatus
from edge_inference.backends.isolated import recorded
from edge_inference.backends.options import describe_options
from edge_inference.edge.detection.model_files import runs_entry
from edge_inference.edge.settings import get_settings
from edge_inference.models.registry import REGISTRY

INCIDENTS_SHOWN = 5


@dataclass
class BackendReport(BackendStatus):
    models: list[str] = field(default_factory=list)  # registry models it can run
    options: list[dict[str, Any]] = field(default_factory=list)  # its engine_options: name, type, default, help
    # its processes' last deaths (backends/isolated.py), newest last: "2026-11-28 02:41:07 the crashy engine ..."
    incidents: list[str] = field(default_factory=list)


def backends_report() -> list[BackendReport]:
    reports = []
    deaths = recorded(get_settings().model_cache)
    for engine in engines().values():
        models = [e.name for e in REGISTRY.values() if runs_entry(engine, e)]
        options = describe_options(engine.options)
        said = [f"{_when(d.at)} {d.line}" for d in deaths if d.engine == engine.key][-INCIDENTS_SHOWN:]
        reports.append(BackendReport(**asdict(engine.probe()), models=models, options=options, incidents=said))
    return reports


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
