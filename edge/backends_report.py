"""The hardware/backends report shared by `edge backends` and GET /api/v1/backends."""

from __future__ import annotations

from typing import Any

from backends.discovery import probe_all
from models.registry import REGISTRY


def backends_report() -> list[dict[str, Any]]:
    rows = []
    for status in probe_all():
        row = status.to_dict()
        row["models"] = [e.name for e in REGISTRY.values() if status.key in e.engines]
        rows.append(row)
    return rows
