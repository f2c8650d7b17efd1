"""Where measurements are kept: the key a measurement is kept under (model files, engine versions, machine), and the
cache file (EDGE_AUTO_CACHE)."""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from edge_inference.backends import engines
from edge_inference.backends.hardware import (
    coral_pcie_devices,
    coral_usb_devices,
    hailo_pci_devices,
    intel_accelerators,
    nvidia_gpus,
    rockchip_soc,
)
from edge_inference.edge.detection.auto.figures import Candidate, Measurement
from edge_inference.edge.detection.machine import describe_machine
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import Settings
from edge_inference.models.download import sha256_of
from edge_inference.models.registry import get_entry, is_registry_name


def _model_hash(candidate: Candidate) -> str:
    if is_registry_name(candidate.model):
        return get_entry(candidate.model).model_file.sha256
    return sha256_of(Path(candidate.model))


def machine_fingerprint() -> str:
    """The CPU and the accelerators this machine has: a measurement holds while these stay the same."""
    found = [
        *coral_usb_devices(),
        *coral_pcie_devices(),
        *nvidia_gpus(),
        *hailo_pci_devices(),
        rockchip_soc() or "",
        *intel_accelerators(),
    ]
    cpu = describe_machine().split(", Python")[0]
    return "; ".join([cpu, *[f for f in found if f]])


def cache_key(found: list[Candidate]) -> str:
    parts = {
        "candidates": sorted(f"{c.backend}:{c.device}:{_model_hash(c)}" for c in found),
        "engines": {c.backend: engines()[c.backend].versions() for c in found},
        "machine": machine_fingerprint(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def cache_path(settings: Settings) -> Path:
    return settings.auto_cache


def read_cache(settings: Settings) -> dict[str, dict[str, object]]:
    try:
        data = json.loads(cache_path(settings).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_cache(
    settings: Settings, key: str, model: str, results: list[Measurement], others_busy: float | None = None
) -> None:
    data = read_cache(settings)
    data[key] = {
        "model": model,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_fingerprint(),
        # cores other programs kept busy meanwhile: a measurement made at a busy moment is made again once quiet
        "others_busy_cores": None if others_busy is None else round(others_busy, 2),
        "results": [asdict(r) for r in results],
    }
    path = cache_path(settings)
    temporary = path.with_suffix(".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps(data, indent=1))
        temporary.replace(path)  # two services starting together never read half a file
    except OSError as exc:
        raise _cannot_keep(path, exc) from None


def check_cache_writable(settings: Settings) -> None:
    """An EdgeError if a measurement could not be kept: auto then measures nothing, where it would have timed the
    engines for half a minute at every start and thrown the result away."""
    path = cache_path(settings)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".writable-"):  # as write_cache's file is made
            pass
    except OSError as exc:
        raise _cannot_keep(path, exc) from None


def _cannot_keep(path: Path, exc: OSError) -> EdgeError:
    # a file where a folder of the path should be: mkdir says "File exists", which names neither
    blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    why = f"{blocker} is a file, not a folder" if blocker is not None else exc.strerror
    return EdgeError(
        f"cannot keep the measurement in {path}: {why}; set EDGE_AUTO_CACHE to a file this user may "
        "write, or name the engine with --backend"
    )
