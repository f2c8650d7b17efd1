"""The engine `--backend auto` runs: the stored pick, a measurement made now or in the background, and the live
check that asks for a new one when the service's own CPU per frame has grown."""

from __future__ import annotations

import logging
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, cast

from edge_inference.edge.detection.auto.candidates import candidates
from edge_inference.edge.detection.auto.figures import (
    BUSY_CORES,
    QUIET_CORES,
    QUIET_SAMPLE_S,
    Candidate,
    Measurement,
    certainty,
    fastest,
)
from edge_inference.edge.detection.auto.lock import measuring_on_this_machine
from edge_inference.edge.detection.auto.store import cache_path, check_cache_writable, read_cache
from edge_inference.edge.detection.auto.timing import measure_unlocked
from edge_inference.edge.detection.machine import OthersLoad
from edge_inference.edge.detection.model_files import ModelFiles
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import Settings

_MEASURING = threading.Lock()  # held through a measurement, and while waiting for another process's

_BOOKKEEPING = threading.Lock()  # the sets below: never held long, so the watchdog's live check never waits

_FAILED: dict[str, str] = {}  # key -> why its measurement could not be made or kept, in this process

_BACKGROUND: set[str] = set()  # keys being measured in the background

_PICKED: dict[str, tuple[str, str] | None] = {}  # key -> the measured pick (backend, device), once measured

_PICKED_AT: dict[str, float] = {}  # key -> when `_PICKED` was last set (monotonic)

_REMEASURED: dict[str, float] = {}  # key -> when the live check last asked for a new measurement

_STALE: set[str] = set()  # keys whose stored measurement was made on a busy machine, now quiet: to measure again

_LOOKED: set[str] = set()  # keys whose stored measurement's load was looked at in this process

SLOWER, LOOSE = 2.0, 1.5  # now / settled CPU per frame that calls for a new measurement: a sure pick, a close one

REMEASURE_EVERY_S = 3600.0  # at most this often per measurement: it costs the streams a few seconds of CPU

log = logging.getLogger("edge.auto")

_LINES_TO_LOG = False  # True in a service (`lines_to_log`): its log has a time and a level on every line


def lines_to_log() -> None:
    """Auto's lines from now on go through the `edge.auto` logger, as the service's other lines do; a command's
    progress (`edge detect`, `edge bench`) stays plain on stderr."""
    global _LINES_TO_LOG
    _LINES_TO_LOG = True


@dataclass(frozen=True)
class AutoChoice:
    backend: str
    device: str
    model: str
    reason: str
    pending: str | None = None  # the cache key being measured in the background: this choice is provisional
    key: str | None = None  # the stored measurement this choice was read from
    timing: Measurement | None = None  # the pick's own figures in it, for the live check
    sure: bool = False  # every round of the pick beat every round of the others

    @property
    def measured(self) -> bool:
        """The background measurement this provisional choice waits for has ended."""
        return self.pending is not None and self.pending in _PICKED

    def superseded(self) -> str | None:
        """The engine a background measurement picked instead of this provisional choice ("openvino on AUTO"), once
        it did; None while it measures or when it picked this one."""
        picked = _PICKED.get(self.pending) if self.pending else None
        return named_pick(picked) if picked is not None and picked != (self.backend, self.device) else None


def named_pick(pick: tuple[str, str]) -> str:
    return f"{pick[0]} on {pick[1]}"


def stored_results(key: str, found: list[Candidate], model: str, settings: Settings) -> list[Measurement]:
    """The measurement kept under `key`, made now when there is none; [] if that failed."""
    why = "no engine could be timed"
    with _MEASURING:  # streams starting together measure once, one engine at a time, not side by side
        if not _kept(key, settings) and key not in _FAILED:
            try:
                check_cache_writable(settings)
                with measuring_on_this_machine(settings, _say, len(found)):
                    if not _kept(key, settings):  # another process may have measured it while it waited
                        where = cache_path(settings)
                        _say(f"timing the engines that can run {model} on this machine (once; kept in {where})")
                        measure_unlocked(found, model, settings, say=_say)
                        _STALE.discard(key)
            except EdgeError as exc:  # not to be kept, or the other process never finished: the ranking's choice
                _say(str(exc), error=True)
                why = str(exc)
    entry = read_cache(settings).get(key)
    if entry is None:
        _FAILED.setdefault(key, why)  # not again in this process: every stream and reload would wait for it
    try:
        results = [Measurement(**r) for r in cast(list[dict[str, Any]], entry["results"])] if entry else []
    except (TypeError, KeyError):  # a hand-edited or older file: measure again next time
        results = []
    best = fastest(results)
    _PICKED[key] = (best.backend, best.device) if best else None
    _PICKED_AT[key] = time.monotonic()
    return results


@dataclass(frozen=True)
class Unmeasured:
    """No measured pick to serve (yet): why, for the ranking's choice made instead, and the key being measured in
    the background when one is."""

    why: str = ""
    pending: str | None = None


def measured_pick(
    key: str, found: list[Candidate], model: str, settings: Settings, wait: bool = True, stored_only: bool = False
) -> AutoChoice | Unmeasured:
    """The measured pick among `found` (kept under `key`; measured now when not yet, or in the background without
    `wait`); Unmeasured, with why, where there is none to serve. With `stored_only`, nothing is measured."""
    if stored_only and key not in read_cache(settings):
        return Unmeasured("not measured on this machine yet (the service times the engines)")
    _look_at_its_load(key, settings)
    if not wait and not _kept(key, settings) and key not in _FAILED:
        _measure_in_background(key, found, model, settings)
        return Unmeasured("the engines are being timed in the background; until then", pending=key)
    results = stored_results(key, found, model, settings)
    best = fastest(results)
    if best is None:
        why = _FAILED.get(key) or "no engine ran a timed round"
        return Unmeasured(f"no measurement could be made or kept ({why.rstrip('.')})")
    reason = f"fastest here when measured ({_figures(best, results)}); {certainty(results)}"
    # the candidate's own model: a stored result may come from another copy of the same file
    pick = next(c for c in found if (c.backend, c.device) == (best.backend, best.device))
    sure = certainty(results).startswith("sure")
    return AutoChoice(pick.backend, pick.device, pick.model, reason, key=key, timing=best, sure=sure)


def _kept(key: str, settings: Settings) -> bool:
    """A measurement is stored under `key` and is not to be made again (`_look_at_its_load`)."""
    entry = read_cache(settings).get(key)
    if entry is None:
        return False
    return key not in _STALE or not _made_busy(entry)


def _made_busy(entry: dict[str, object]) -> bool:
    """The stored measurement was made while other programs kept BUSY_CORES or more busy."""
    return float(cast(float, entry.get("others_busy_cores") or 0.0)) >= BUSY_CORES


def _look_at_its_load(key: str, settings: Settings) -> None:
    """Once per process and measurement: one made while other programs kept the machine busy is marked to be made
    again where they are quiet now (a short sample of the machine's load)."""
    with _BOOKKEEPING:
        if key in _LOOKED:
            return
        _LOOKED.add(key)
    entry = read_cache(settings).get(key) or {}
    if not _made_busy(entry):
        return
    quiet = _others_now()
    if quiet is not None and quiet < QUIET_CORES:
        _say(
            f"the stored measurement was made while other programs kept {entry['others_busy_cores']} cores busy; "
            "the machine is quiet now: measuring again"
        )
        _STALE.add(key)


def _others_now() -> float | None:
    """Cores other programs keep busy now, over QUIET_SAMPLE_S."""
    sample = OthersLoad()
    time.sleep(QUIET_SAMPLE_S)
    return sample.cores()


def _figures(best: Measurement, results: list[Measurement]) -> str:
    """The pick's best round and the others', for the stream's note."""
    others = ", ".join(f"{r.backend} {r.best_fps:.1f}" for r in results if r is not best and r.best_fps)
    return f"{best.best_fps or 0:.1f} frames/s in its best round; {others or 'no other engine ran'}"


def _measure_in_background(key: str, found: list[Candidate], model: str, settings: Settings) -> None:
    with _BOOKKEEPING:
        if key in _BACKGROUND:
            return
        _BACKGROUND.add(key)
    arguments = (key, found, model, settings)
    threading.Thread(target=stored_results, args=arguments, name="auto-measure", daemon=True).start()


def live_check(choice: AutoChoice, live_cpu_ms: float, settled_cpu_ms: float | None) -> str | None:
    """Whether the service's own figures call for measuring again: a frame now costs SLOWER times the CPU it cost
    once this service had settled (LOOSE when another engine was close). Like with like: the service's CPU per frame
    against its own, never inference times against the quiet measurement (one engine alone on other threads), and
    never wall times, which another program's load raises while the engines' order stays (issue 62: re-timing the
    engines under modest load cost the streams a third of their frames). Returns the reason, or None."""
    if settled_cpu_ms is None or choice.key is None:
        return None
    if live_cpu_ms <= (SLOWER if choice.sure else LOOSE) * settled_cpu_ms:
        return None
    return (
        f"frames take {live_cpu_ms:.3g} ms of CPU now, {live_cpu_ms / settled_cpu_ms:.1f}x the {settled_cpu_ms:.3g}"
        " ms they took once this service had settled"
    )


def remeasure_in_background(choice: AutoChoice, files: ModelFiles, settings: Settings, why: str) -> bool:
    """Measure again (at most once per REMEASURE_EVERY_S per measurement, in this process); False when not now.
    The new pick lands in `_PICKED`, where the detectors' `superseded` reads it."""
    key = choice.key
    if key is None:
        return False
    now = time.monotonic()
    with _BOOKKEEPING:  # called by the watchdog: it must not wait behind a measurement
        last = _REMEASURED.get(key)
        if last is not None and now - last < REMEASURE_EVERY_S:
            return False
        _REMEASURED[key] = now
    _say(f"measuring {files.model} again: {choice.backend}'s {why}")

    def again() -> None:
        found = candidates(files, settings)
        with _MEASURING:
            try:
                with measuring_on_this_machine(settings, _say, len(found)):
                    _, results = measure_unlocked(found, files.model, settings, say=_say)
                best = fastest(results)
                _PICKED[key] = (best.backend, best.device) if best else None
            except (EdgeError, OSError) as exc:  # a model file removed meanwhile: said, the pick stands
                _say(str(exc), error=True)
            _PICKED_AT[key] = time.monotonic()  # what `remeasured` waits for, measured or not

    threading.Thread(target=again, name="auto-remeasure", daemon=True).start()
    return True


def remeasured(choice: AutoChoice) -> tuple[str, str] | bool | None:
    """After `remeasure_in_background`: False while it runs; then the pick (backend, device), or None."""
    if choice.key is None or choice.key not in _REMEASURED:
        return False
    stamp = _PICKED_AT.get(choice.key)
    if stamp is None or stamp < _REMEASURED[choice.key]:
        return False
    return _PICKED.get(choice.key)


def _say(line: str, error: bool = False) -> None:
    """A line of auto's: through the service's logger (time and level, as every other line) in a service, else on
    stderr as a command's progress (`error:` in front of a failure)."""
    if _LINES_TO_LOG:
        log.log(logging.WARNING if error else logging.INFO, "--backend auto: %s", line)
        return
    print(f"error: {line}" if error else f"--backend auto: {line}", file=sys.stderr, flush=True)
