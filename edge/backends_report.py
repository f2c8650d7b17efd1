"""The hardware/backends report shared by `edge backends` and GET /api/v1/backends."""

from __future__ import annotations

from typing import Any

from edge_inference.backends import engines
from edge_inference.edge.loader import runs_entry
from edge_inference.models.registry import REGISTRY


def backends_report() -> list[dict[str, Any]]:
    rows = []
    for engine in engines().values():
        row = engine.probe().to_dict()
        row["models"] = [e.name for e in REGISTRY.values() if runs_entry(engine, e)]
        rows.append(row)
    return rows
