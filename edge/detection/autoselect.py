"""`--backend auto` by measurement: the engine that is fastest for this model on this machine.

A fixed rule cannot know: on one day OpenVINO ran yolox-nano 1.45x faster than ONNX Runtime here, on another 0.9x.
On first use of a model, every engine (and device) that can run it here is timed on a few warm inferences, the
fastest wins, and the result is kept in ~/.cache/edge-inference/auto-backend.json (EDGE_AUTO_CACHE) under a key
made of the model files' hashes, the engines' versions and the machine (CPU, cores, accelerators found). Later
runs read the choice without importing any engine they will not use. Each engine is timed in a child process of
its own, so the engines tried and dropped leave nothing behind in the service's memory, and within a time budget
(EDGE_AUTO_BUDGET_S, 120 s): an engine that cannot load and run a few inferences in it (a slow device, emulation, a
model too large for it) loses, and the others are still compared. The service does not wait for a measurement: it
serves on the engines' ranking's choice meanwhile and moves to the measured pick once it is known (`superseded`).
`edge backends --bench MODEL` shows the table; EDGE_AUTO_MEASURE=0 chooses by the fixed ranking instead.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from edge_inference.backends import engines
from edge_inference.backends.discovery import choose_backend
from edge_inference.backends.hardware import (
    coral_pcie_devices,
    coral_usb_devices,
    hailo_pci_devices,
    intel_accelerators,
    nvidia_gpus,
    rockchip_soc,
)
from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.machine import describe_machine
from edge_inference.edge.detection.model_files import locate_model, model_for_engine
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import Settings, get_settings
from edge_inference.models.download import ChecksumMismatchError, sha256_of
from edge_inference.models.registry import get_entry, is_registry_name

WARM_RUNS, TIMED_RUNS, MAX_SECONDS = 2, 10, 3.0
_MEASURING = threading.Lock()
_FAILED: set[str] = set()  # keys whose measurement could not be made or kept, in this process
_BACKGROUND: set[str] = set()  # keys being measured in the background
_PICKED: dict[str, tuple[str, str] | None] = {}  # key -> the measured pick (backend, device), once measured
Say = Callable[[str], None]
# (model, backend, device) -> a loaded detector; the loader's, passed in (the loader itself asks this module)
Load = Callable[[str, str, str], Detector]


@dataclass(frozen=True)
class Candidate:
    backend: str
    device: str
    model: str  # what to load: the registry name of this engine's file, or the file itself


@dataclass(frozen=True)
class Measurement:
    backend: str
    device: str
    model: str
    ms_p50: float | None  # one frame: pre-processing, inference and decoding
    error: str | None = None

    @property
    def fps(self) -> float | None:
        return None if not self.ms_p50 else 1000.0 / self.ms_p50


@dataclass(frozen=True)
class AutoChoice:
    backend: str
    device: str
    model: str
    reason: str
    pending: str | None = None  # the cache key being measured in the background: this choice is provisional

    @property
    def measured(self) -> bool:
        """The background measurement this provisional choice waits for has ended."""
        return self.pending is not None and self.pending in _PICKED

    def superseded(self) -> bool:
        """True once a background measurement picked another engine than this provisional choice."""
        picked = _PICKED.get(self.pending) if self.pending else None
        return picked is not None and picked != (self.backend, self.device)


def candidates(model: str, settings: Settings) -> list[Candidate]:
    """Every engine (with the device it would use) that can run `model` here; registry families count each
    engine's own file of the same weights."""
    found = []
    for key, engine in engines().items():
        name, _ = model_for_engine(model, key)  # its own file of a registry family, or the file if it reads it
        if name is None:
            continue
        try:
            _, path = locate_model(name, settings)
        except ChecksumMismatchError:
            raise  # a swapped or corrupted cached file is the user's to know about, not a missing candidate
        except Exception:  # noqa: BLE001, S112 - a family member that cannot be fetched here is not a candidate
            continue
        offer = engine.rank(path)
        if offer is not None:
            found.append(Candidate(key, offer.device, name))
    return found


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


def write_cache(settings: Settings, key: str, model: str, results: list[Measurement]) -> None:
    data = read_cache(settings)
    data[key] = {
        "model": model,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_fingerprint(),
        "results": [asdict(r) for r in results],
    }
    path = cache_path(settings)
    temporary = path.with_suffix(".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps(data, indent=1))
        temporary.replace(path)  # two services starting together never read half a file
    except OSError as exc:
        raise EdgeError(
            f"cannot keep the measurement in {path}: {exc.strerror}; set EDGE_AUTO_CACHE to a file this user may "
            "write, or name the engine with --backend"
        ) from None


def measure_one(candidate: Candidate, load: Load) -> Measurement:
    """Load, warm up, then time whole frames (pre-processing, inference, decoding) on a fixed noise image."""
    image = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    try:
        detector = load(candidate.model, candidate.backend, candidate.device)
    except Exception as exc:  # noqa: BLE001 - an engine that cannot load here is reported, not fatal
        return Measurement(candidate.backend, candidate.device, candidate.model, None, str(exc).splitlines()[0][:200])
    try:
        for _ in range(WARM_RUNS):
            detector.detect(image)
        times: list[float] = []
        deadline = time.monotonic() + MAX_SECONDS
        while len(times) < TIMED_RUNS and (len(times) < 3 or time.monotonic() < deadline):
            t0 = time.perf_counter()
            detector.detect(image)
            times.append((time.perf_counter() - t0) * 1e3)
    except Exception as exc:  # noqa: BLE001 - e.g. a device that fails at its first inference
        return Measurement(candidate.backend, candidate.device, candidate.model, None, str(exc).splitlines()[0][:200])
    finally:
        detector.close()
    return Measurement(candidate.backend, candidate.device, candidate.model, round(float(np.median(times)), 3))


def measure(model: str, settings: Settings, say: Say | None = None) -> tuple[str, list[Measurement]]:
    """Time every candidate, each in a child process within the budget, and store the results; (cache key, results)."""
    found = candidates(model, settings)
    if not found:
        raise EdgeError(f"no installed engine can run {model}; see `edge backends` for how to install one")
    budget = settings.auto_budget_s  # per engine: load, warm up, time (a Pi 4 does yolox-nano in seconds)
    results = []
    for number, candidate in enumerate(found, 1):
        if say:
            say(f"timing {candidate.backend} ({candidate.device}), {number} of {len(found)}, at most {budget:g} s...")
        result = _measure_candidate_in_child(candidate, budget)
        if say:
            say(f"  {result.ms_p50:.1f} ms per frame" if result.ms_p50 else f"  cannot run: {result.error}")
        results.append(result)
    key = cache_key(found)
    write_cache(settings, key, model, results)
    return key, results


def _measure_candidate_in_child(candidate: Candidate, budget_s: float) -> Measurement:
    """`edge backends --bench` for one candidate, in a child process that is killed at the budget."""
    spec = json.dumps(asdict(candidate))
    command = [sys.executable, "-m", "edge_inference", "backends", "--bench", candidate.model, "--candidate", spec]
    failed = Measurement(candidate.backend, candidate.device, candidate.model, None)
    try:
        child = subprocess.run(command, capture_output=True, text=True, timeout=budget_s, check=False)
    except subprocess.TimeoutExpired:
        why = f"too slow here: not loaded and timed within {budget_s:g} s (EDGE_AUTO_BUDGET_S)"
        return dataclasses.replace(failed, error=why)
    try:
        return Measurement(**json.loads(child.stdout.strip().splitlines()[-1]))
    except (ValueError, TypeError, IndexError):
        errors = [line for line in child.stderr.splitlines() if line.startswith("error:")]
        why = errors[-1][6:].strip() if errors else f"the measurement ended with status {child.returncode}"
        return dataclasses.replace(failed, error=why[:200])


def fastest(results: list[Measurement]) -> Measurement | None:
    timed = [r for r in results if r.ms_p50]
    return min(timed, key=lambda r: r.ms_p50 or 0.0) if timed else None


def stored_results(key: str, model: str, settings: Settings) -> list[Measurement]:
    """The measurement kept under `key`, made now when there is none; [] if that failed."""
    with _MEASURING:  # streams starting together measure once, one engine at a time, not side by side
        if key not in read_cache(settings) and key not in _FAILED:
            _measure_now(model, settings)
    entry = read_cache(settings).get(key)
    if entry is None:
        _FAILED.add(key)  # not again in this process: every stream and reload would wait for it
    try:
        results = [Measurement(**r) for r in cast(list[dict[str, Any]], entry["results"])] if entry else []
    except (TypeError, KeyError):  # a hand-edited or older file: measure again next time
        results = []
    best = fastest(results)
    _PICKED[key] = (best.backend, best.device) if best else None
    return results


def auto_choice(model: str, settings: Settings | None = None, *, measure: bool = True, wait: bool = True) -> AutoChoice:
    """The engine `--backend auto` runs `model` on, measured once per model, engines and machine; by the engines'
    ranking when `measure` is off (a device the user named: only the ranking knows which engine has it). With
    `wait` off, a measurement still to make runs in the background and the ranking's choice comes back at once,
    marked `pending` (the service: frames now, the measured pick once known)."""
    settings = settings or get_settings()
    found = candidates(model, settings)
    if not measure or len(found) <= 1 or os.environ.get("EDGE_AUTO_MEASURE", "1") == "0":
        return _by_rule(model, settings, found)
    key = cache_key(found)
    if not wait and key not in read_cache(settings) and key not in _FAILED:
        _measure_in_background(key, model, settings)
        meanwhile = "the engines are being timed in the background; until then"
        return dataclasses.replace(_by_rule(model, settings, found, meanwhile), pending=key)
    results = stored_results(key, model, settings)
    best = fastest(results)
    if best is None:
        return _by_rule(model, settings, found, "measuring the engines failed")
    others = ", ".join(f"{r.backend} {r.ms_p50:.1f} ms" for r in results if r is not best and r.ms_p50)
    reason = f"fastest here when measured ({best.ms_p50:.1f} ms per frame; {others or 'no other engine ran'})"
    # the candidate's own model: a stored result may come from another copy of the same file
    pick = next(c for c in found if (c.backend, c.device) == (best.backend, best.device))
    return AutoChoice(pick.backend, pick.device, pick.model, reason)


def _by_rule(model: str, settings: Settings, found: list[Candidate], why: str = "") -> AutoChoice:
    _, path = locate_model(model, settings)
    choice = choose_backend(path)
    if len(found) == 1:
        only = found[0]
        return AutoChoice(only.backend, only.device, only.model, f"the only engine here that runs it ({choice.reason})")
    prefix = f"{why}; " if why else ""
    return AutoChoice(choice.backend, choice.device, model, prefix + choice.reason)


def _measure_in_background(key: str, model: str, settings: Settings) -> None:
    with _MEASURING:
        if key in _BACKGROUND:
            return
        _BACKGROUND.add(key)
    threading.Thread(target=stored_results, args=(key, model, settings), name="auto-measure", daemon=True).start()


def _say(line: str) -> None:
    print(f"--backend auto: {line}", file=sys.stderr, flush=True)


def _measure_now(model: str, settings: Settings) -> None:
    """Time the engines (each in a child of its own) with progress on stderr; a failure is one `error:` line, and
    the caller falls back to the ranking."""
    _say(f"timing the engines that can run {model} on this machine (once; kept in {cache_path(settings)})")
    try:
        measure(model, settings, say=_say)
    except EdgeError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
