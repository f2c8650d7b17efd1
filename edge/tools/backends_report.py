"""The hardware/backends report shared by `edge backends` and GET /api/v1/backends."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from edge_inference.backends import engines
from edge_inference.backends.engine import BackendStatus
from edge_inference.backends.options import describe_options
from edge_inference.edge.detection.model_files import runs_entry
from edge_inference.models.registry import REGISTRY


@dataclass
class BackendReport(BackendStatus):
    models: list[str] = field(default_factory=list)  # registry models it can run
    options: list[dict[str, Any]] = field(default_factory=list)  # its engine_options: name, type, default, help


def backends_report() -> list[BackendReport]:
    reports = []
    for engine in engines().values():
        models = [e.name for e in REGISTRY.values() if runs_entry(engine, e)]
        options = describe_options(engine.options)
        reports.append(BackendReport(**asdict(engine.probe()), models=models, options=options))
    return reports
