"""`--backend auto` by measurement: the engine that is fastest for this model on this machine.

A fixed rule cannot know: on one day OpenVINO ran yolox-nano 1.45x faster than ONNX Runtime here, on another 0.9x.
On first use of a model, every engine (and device) that can run it here is loaded in a child process of its own,
and the children are timed in turns (ROUNDS rounds of EDGE_AUTO_ROUND_S, 1 s, each, interleaved, so a busy moment
of the machine falls on every engine alike) running whole frames as the pipeline does (pre-processing, inference,
decoding): the highest throughput in a best round wins (load from elsewhere only slows a round down), and among
engines within CLOSE of it the one with the least CPU per frame (the kernel's count), since the difference is then
within the noise. How sure the pick is goes with it. The result is kept in ~/.cache/edge-inference/auto-backend.json
(EDGE_AUTO_CACHE) under a key made of the model files' hashes, the engines' versions and the machine (CPU, cores,
accelerators found). Later runs read the choice without importing any engine they will not use. The engines tried
and dropped leave nothing behind in the service's memory, and each must load within a time budget
(EDGE_AUTO_BUDGET_S, 120 s): an engine that cannot load and run a few inferences in it (a slow device, emulation, a
model too large for it) loses, and the others are still compared.
The service does not wait for a measurement: it serves on the engines' ranking's choice meanwhile and moves to the
measured pick once it is known (`superseded`). Serving, it checks the service's CPU time per frame against its
own once it has settled (`live_check`) and measures again in the background only when that has grown beyond a
margin: load from other programs slows frames down without changing which engine is fastest per frame.
`edge backends --bench MODEL` shows the table; EDGE_AUTO_MEASURE=0 chooses by the fixed ranking instead.
One measurement at a time on a machine, across processes (`measuring_on_this_machine`): a second process waits and
takes the first one's result; it waits no longer than a measurement can take (a holder stopped with Ctrl-Z or stuck
in a driver is named by its process id, and the waiter goes on by the ranking).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, cast

import numpy as np

from edge_inference.backends import brief, engines
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
from edge_inference.edge.detection.machine import OthersLoad, describe_machine
from edge_inference.edge.detection.model_files import locate_model, model_for_engine
from edge_inference.edge.detection.timings import process_cpu_seconds
from edge_inference.edge.errors import EdgeError, counted
from edge_inference.edge.settings import Settings, get_settings
from edge_inference.models.download import ChecksumMismatchError, sha256_of
from edge_inference.models.registry import get_entry, is_registry_name

WARM_RUNS = 2
ROUNDS = 3  # turns per engine; the seconds of each are the settings' auto_round_s
CLOSE = 0.03  # engines whose best rounds are within 3% of the best are a tie, decided by CPU per frame
_MEASURING = threading.Lock()  # held through a measurement, and while waiting for another process's
_BOOKKEEPING = threading.Lock()  # the sets below: never held long, so the watchdog's live check never waits
_FAILED: dict[str, str] = {}  # key -> why its measurement could not be made or kept, in this process
_BACKGROUND: set[str] = set()  # keys being measured in the background
_PICKED: dict[str, tuple[str, str] | None] = {}  # key -> the measured pick (backend, device), once measured
_PICKED_AT: dict[str, float] = {}  # key -> when `_PICKED` was last set (monotonic)
_REMEASURED: dict[str, float] = {}  # key -> when the live check last asked for a new measurement
_STALE: set[str] = set()  # keys whose stored measurement was made on a busy machine, now quiet: to measure again
_LOOKED: set[str] = set()  # keys whose stored measurement's load was looked at in this process
# Live inferences in a figure the live check compares. It compares the service's CPU per frame with its own once
# it has run EDGE_AUTO_SETTLE_S (180 s): seven streams starting, engines warming and auto's own first measurement
# made a quiet measurement look 5.3x slower in the first 10 s
LIVE_SAMPLES = 100
SLOWER, LOOSE = 2.0, 1.5  # now / settled CPU per frame that calls for a new measurement: a sure pick, a close one
# A measurement during which other programs kept BUSY_CORES or more busy is made again at a later start that finds
# them using under QUIET_CORES (sampled for QUIET_SAMPLE_S): a pick stored while the machine was busy was kept once
# it was quiet, 0.88x the fastest engine three times out of three (issue 62)
BUSY_CORES, QUIET_CORES, QUIET_SAMPLE_S = 0.5, 0.25, 0.5
REMEASURE_EVERY_S = 3600.0  # at most this often per measurement: it costs the streams a few seconds of CPU
CHILD_STOP_S = 5.0  # a timed child's time to end once told to, before it is killed
HOLDER_SLACK_S = 2.0  # beyond a measurement's own limits: storing it
LOCK_POLL_S = 0.2  # how often a process waiting for another's measurement looks again
Say = Callable[[str], None]
# (model, backend, device) -> a loaded detector; the loader's, passed in (the loader itself asks this module)
Load = Callable[[str, str, str], Detector]
log = logging.getLogger("edge.auto")
_LINES_TO_LOG = False  # True in a service (`lines_to_log`): its log has a time and a level on every line


def lines_to_log() -> None:
    """Auto's lines from now on go through the `edge.auto` logger, as the service's other lines do; a command's
    progress (`edge detect`, `edge bench`) stays plain on stderr."""
    global _LINES_TO_LOG
    _LINES_TO_LOG = True


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
    ms_p50: float | None  # one frame (pre-processing, inference, decoding): 1000 / the median round's throughput
    error: str | None = None
    fps_rounds: list[float] = dataclasses.field(default_factory=list)  # frames per second in each round
    cpu_ms: float | None = None  # CPU per frame over all rounds, from the kernel
    infer_ms: float | None = None  # the engine's own run per frame (no pre/post): what the service sees live

    @property
    def fps(self) -> float | None:
        return None if not self.ms_p50 else 1000.0 / self.ms_p50

    @property
    def best_fps(self) -> float | None:
        """Throughput in the engine's best round: what decides. Load from elsewhere on the machine (a burst of
        uploads, another stream) only ever slows a round down, so the best round is the least disturbed figure; a
        burst over some rounds of one engine moved its median by 20% (ONNX Runtime 60.6 against 78.4 fps when
        undisturbed) and picked an engine that used 1.2x the CPU per frame."""
        return max(self.fps_rounds) if self.fps_rounds else self.fps

    @property
    def spread(self) -> float:
        """(fastest - slowest round) / median: how much this engine's figure moved while it was measured."""
        if len(self.fps_rounds) < 2 or not self.fps:
            return 0.0
        return (max(self.fps_rounds) - min(self.fps_rounds)) / self.fps


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


def bench_image() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)


def serve_rounds(candidate: Candidate, load: Load, frames: list[np.ndarray], requests: Any, replies: Any) -> None:
    """The child's side: load and warm up, say `ready` (or the error), then for each line of `requests` (seconds)
    run whole frames that long and reply with the frames done, the seconds and the CPU seconds they took."""

    def reply(message: dict[str, Any]) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    try:
        detector = load(candidate.model, candidate.backend, candidate.device)
        for index in range(WARM_RUNS):
            detector.detect(frames[index % len(frames)])
    except Exception as exc:  # noqa: BLE001 - an engine that cannot load or run here is reported, not fatal
        reply({"error": brief(str(exc)) or type(exc).__name__})
        return
    reply({"ready": True})
    done = 0
    try:
        for line in requests:
            seconds = float(line)
            count, inference, t0, cpu0 = 0, 0.0, time.perf_counter(), process_cpu_seconds()
            while count < 3 or time.perf_counter() - t0 < seconds:
                inference += detector.detect(frames[done % len(frames)]).timings.inference_ms
                count += 1
                done += 1
            took, cpu = time.perf_counter() - t0, process_cpu_seconds() - cpu0
            reply({"frames": count, "seconds": took, "cpu_s": cpu, "infer_ms": inference / count})
    finally:
        detector.close()


def measure(
    model: str, settings: Settings, say: Say | None = None, frames: str | None = None
) -> tuple[str, list[Measurement]]:
    """Time every candidate in turns, each in a child process loaded within the budget, and store the results;
    (cache key, results). `frames`: a video or image to time on (a fixed noise image when none)."""
    with measuring_on_this_machine(settings, say, len(candidates(model, settings))):
        return _measure(model, settings, say, frames)


def longest_measurement_s(engines: int, settings: Settings) -> float:
    """The longest a measurement of `engines` engines can take, by the limits `_measure` enforces: every engine
    loads within the budget (all at once), each of its rounds answers within the round plus the budget or it is
    dropped, and each child ends within CHILD_STOP_S of being told to or is killed."""
    budget = settings.auto_budget_s
    return budget + ROUNDS * engines * (settings.auto_round_s + budget) + engines * CHILD_STOP_S + HOLDER_SLACK_S


@contextlib.contextmanager
def measuring_on_this_machine(settings: Settings, say: Say | None = None, engines: int = 1) -> Iterator[None]:
    """One measurement at a time on this machine, across processes (a service and `edge detect --backend auto`
    started together, two services): engines timed side by side slow each other down and rank at random, and two
    writers of the cache would lose one's entry. An flock on a file beside the cache, which holds its holder's
    process id and how long its measurement can take; the kernel releases it when its holder dies. A holder that
    is stopped (Ctrl-Z) or stuck is waited for no longer than that (then an EdgeError). Where no lock file can be
    made, the measurement goes on without it (keeping it will say why)."""
    cache = cache_path(settings)
    path = cache.with_name(cache.name + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")  # noqa: SIM115 - held for the body of the with below
    except OSError:
        yield
        return
    with handle:
        longest = longest_measurement_s(engines, settings)
        if not _locked(handle):
            _wait_for_holder(handle, longest, say)
        with contextlib.suppress(OSError):  # who holds it and until when, for a process that waits (a full disk: not)
            handle.truncate(0)
            handle.write(f"{os.getpid()} {time.monotonic():.3f} {longest:.1f}\n")
            handle.flush()
        yield


def _locked(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@dataclass(frozen=True)
class _Holder:
    """What the process holding the measurement wrote: who, and when its measurement must have ended (the
    system-wide monotonic clock, which a Pi's clock jumping at its first NTP sync does not move)."""

    pid: int
    ends_by: float


def _wait_for_holder(handle: IO[str], own_longest_s: float, say: Say | None) -> None:
    """Until the lock is free, or the holder's measurement has run past the longest its own limits allow (by our own
    limits while it has not said them yet)."""
    holder = _holder(handle)
    if say is not None:
        say(f"another edge process on this machine{_named(holder)} is timing engines; waiting for it to finish first")
    fallback = time.monotonic() + own_longest_s
    while not _locked(handle):
        holder = _holder(handle) or holder
        if time.monotonic() > (holder.ends_by if holder else fallback):
            raise EdgeError(
                f"the edge process{_named(holder)} timing engines on this machine has held the measurement longer"
                " than a measurement can take: it is stopped (Ctrl-Z) or stuck. End it (or `kill -CONT` it), or set"
                " EDGE_AUTO_MEASURE=0 to choose by the engines' ranking"
            )
        time.sleep(LOCK_POLL_S)


def _named(holder: _Holder | None) -> str:
    return f" (pid {holder.pid})" if holder else ""


def _holder(handle: IO[str]) -> _Holder | None:
    """The lock file's record, or None while its holder has not written it (or an older version wrote only a pid)."""
    with contextlib.suppress(OSError, ValueError):
        handle.seek(0)
        pid, started, longest = handle.read().split()
        return _Holder(int(pid), float(started) + float(longest))
    return None


def _measure(
    model: str, settings: Settings, say: Say | None = None, frames: str | None = None
) -> tuple[str, list[Measurement]]:
    found = candidates(model, settings)
    if not found:
        raise EdgeError(f"no installed engine can run {model}; see `edge backends` for how to install one")
    budget = settings.auto_budget_s  # per engine: load and warm up (a Pi 4 does yolox-nano in seconds)
    say = say or (lambda _line: None)
    started, others = {}, OthersLoad()
    try:
        for number, candidate in enumerate(found, 1):  # all load at once: the slowest load bounds the wait
            say(f"loading {candidate.backend} ({candidate.device}), {number} of {len(found)}, at most {budget:g} s...")
            started[candidate] = _Timed(candidate, frames)
        results = _timed_in_turns(started, budget, settings.auto_round_s, say)
    finally:
        for child in started.values():
            child.stop()
    ordered = [results[c] for c in found]
    for result in ordered:
        if result.ms_p50:
            say(
                f"  {result.backend} ({result.device}): {result.fps:.1f} fps (rounds {_rounds(result)}), "
                f"{result.cpu_ms:.1f} ms CPU per frame"
            )
    busy = others.cores()
    if busy is not None and busy >= BUSY_CORES:
        say(f"  other programs kept {busy:.1f} cores busy meanwhile: measured again at a start that finds them quiet")
    key = cache_key(found)
    write_cache(settings, key, model, ordered, busy)
    return key, ordered


def _timed_in_turns(
    started: dict[Candidate, _Timed], budget: float, round_s: float, say: Say
) -> dict[Candidate, Measurement]:
    """Each child that became ready within the budget runs ROUNDS turns; one that fails or hangs drops out."""
    results: dict[Candidate, Measurement] = {}
    children = {}
    for candidate, child in started.items():
        error = child.wait_ready(budget)
        if error is None:
            children[candidate] = child
            continue
        child.stop()
        results[candidate] = Measurement(candidate.backend, candidate.device, candidate.model, None, error)
        say(f"  {candidate.backend} cannot run: {error}")
    if children:
        say(f"timing {counted(len(children), 'engine')} in turns: {ROUNDS} rounds of {round_s:g} s each...")
    for _ in range(ROUNDS):
        for candidate, child in list(children.items()):
            if not child.round(round_s, budget):
                child.stop()
                del children[candidate]
                results[candidate] = child.result()
    return results | {candidate: child.result() for candidate, child in children.items()}


def _rounds(result: Measurement) -> str:
    return " ".join(f"{f:.1f}" for f in result.fps_rounds)


class _Timed:
    """One candidate's child process (`edge backends --bench MODEL --candidate JSON`), driven round by round."""

    def __init__(self, candidate: Candidate, frames: str | None) -> None:
        self.candidate = candidate
        command = [sys.executable, "-m", "edge_inference", "backends", "--bench", candidate.model]
        command += ["--candidate", json.dumps(asdict(candidate))] + (["--frames", frames] if frames else [])
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.started = time.monotonic()
        self.ready = False  # loaded and warm: it ends on its own when its input closes
        self.rounds: list[tuple[int, float, float]] = []  # frames, seconds, CPU seconds
        self.inference: list[float] = []  # each round's mean inference ms
        self.error: str | None = None

    def _reply(self, timeout: float) -> dict[str, Any] | None:
        """The child's next JSON line, or None (it died, or said nothing within `timeout`)."""
        box: list[str] = []
        assert self.process.stdout is not None
        reader = threading.Thread(target=lambda: box.append(self.process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        if not box or not box[0].strip():
            return None
        try:
            message = json.loads(box[0])
        except ValueError:
            return None
        return message if isinstance(message, dict) else None

    def wait_ready(self, budget_s: float) -> str | None:
        """None once loaded and warm (within `budget_s` of its start); else why not."""
        message = self._reply(max(0.0, budget_s - (time.monotonic() - self.started)))
        if message is None:
            if self.process.poll() is None:
                return f"too slow here: not loaded and warmed up within {budget_s:g} s (EDGE_AUTO_BUDGET_S)"
            return self._child_error()
        if "error" in message:
            return str(message["error"])
        self.ready = True
        return None

    def round(self, seconds: float, budget_s: float) -> bool:
        """One turn of `seconds`; False when the child failed or hung (it is then out)."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(f"{seconds}\n")
            self.process.stdin.flush()
        except OSError:
            self.error = self._child_error()
            return False
        message = self._reply(seconds + budget_s)
        if message is None or "frames" not in message:
            self.error = "stopped answering while timed" if self.process.poll() is None else self._child_error()
            self.ready = False  # a hung child is killed, not waited for
            return False
        self.rounds.append((int(message["frames"]), float(message["seconds"]), float(message["cpu_s"])))
        self.inference.append(float(message.get("infer_ms", 0.0)))
        return True

    def _child_error(self) -> str:
        self.process.wait(timeout=10)
        stderr = self.process.stderr.read() if self.process.stderr else ""
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]
        why = errors[-1][6:].strip() if errors else f"the measurement ended with status {self.process.returncode}"
        return brief(why)

    def result(self) -> Measurement:
        c = self.candidate
        if not self.rounds:
            return Measurement(c.backend, c.device, c.model, None, self.error or "no round was timed")
        fps = [frames / seconds for frames, seconds, _ in self.rounds]
        cpu_ms = sum(cpu for _, _, cpu in self.rounds) * 1e3 / sum(frames for frames, _, _ in self.rounds)
        median = float(np.median(fps))
        rounds = [round(f, 2) for f in fps]
        inference = round(float(np.median(self.inference)), 3) if self.inference else None
        return Measurement(
            c.backend, c.device, c.model, round(1000.0 / median, 3), None, rounds, round(cpu_ms, 2), inference
        )

    def stop(self) -> None:
        if self.process.poll() is None and not self.ready:
            self.process.kill()  # still loading (or stuck in a device): nothing to wait for
            self.process.wait()
        if self.process.poll() is None:
            try:
                if self.process.stdin is not None:
                    self.process.stdin.close()  # the child ends its loop and exits
                self.process.wait(timeout=CHILD_STOP_S)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


def fastest(results: list[Measurement]) -> Measurement | None:
    """The pick: the highest throughput in a best round; among engines within CLOSE of it, the least CPU per
    frame."""
    timed = [r for r in results if r.ms_p50]
    if not timed:
        return None
    best = max(timed, key=lambda r: r.best_fps or 0.0)
    tied = [r for r in timed if (r.best_fps or 0) >= (best.best_fps or 0) * (1 - CLOSE)]
    if len(tied) > 1 and all(r.cpu_ms for r in tied):
        return min(tied, key=lambda r: r.cpu_ms or 0.0)
    return best


def certainty(results: list[Measurement]) -> str:
    """How sure the pick is, in words: its slowest round against the others' fastest."""
    best = fastest(results)
    others = [r for r in results if r.ms_p50 and r is not best]
    if best is None:
        return "no engine could be timed here"
    if not others:
        return "the only engine that ran"
    if not best.fps_rounds or any(not r.fps_rounds for r in others):
        return "from single-frame timings (measured by an older version)"
    runner = max(others, key=lambda r: r.best_fps or 0.0)
    best_fps, runner_fps = best.best_fps or 0.0, runner.best_fps or 1.0
    if min(best.fps_rounds) > max(max(r.fps_rounds) for r in others):
        margin = best_fps / runner_fps
        return f"sure: every round of {best.backend} beat every round of the others ({margin:.2f}x {runner.backend})"
    if runner_fps >= best_fps * (1 - CLOSE):
        return (
            f"close: {best.backend} and {runner.backend} are within {CLOSE:.0%} in throughput; "
            f"{best.backend} uses less CPU per frame ({best.cpu_ms:.1f} vs {runner.cpu_ms:.1f} ms)"
        )
    return (
        f"likely: {best.backend} is ahead in its best round, but {runner.backend}'s best round beat "
        f"{best.backend}'s slowest"
    )


def stored_results(key: str, model: str, settings: Settings) -> list[Measurement]:
    """The measurement kept under `key`, made now when there is none; [] if that failed."""
    why = "no engine could be timed"
    with _MEASURING:  # streams starting together measure once, one engine at a time, not side by side
        if not _kept(key, settings) and key not in _FAILED:
            try:
                check_cache_writable(settings)
                with measuring_on_this_machine(settings, _say, len(candidates(model, settings))):
                    if not _kept(key, settings):  # another process may have measured it while it waited
                        _measure_now(model, settings)
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


def auto_choice(
    model: str, settings: Settings | None = None, *, measure: bool = True, wait: bool = True, stored_only: bool = False
) -> AutoChoice:
    """The engine `--backend auto` runs `model` on, measured once per model, engines and machine; by the engines'
    ranking when `measure` is off (a device the user named: only the ranking knows which engine has it). With
    `wait` off, a measurement still to make runs in the background and the ranking's choice comes back at once,
    marked `pending` (the service: frames now, the measured pick once known). With `stored_only`, nothing is
    measured: the stored pick, or the ranking's while none is stored (`edge serve --check`)."""
    settings = settings or get_settings()
    found = candidates(model, settings)
    if not measure or len(found) <= 1 or os.environ.get("EDGE_AUTO_MEASURE", "1") == "0":
        return _by_rule(model, settings, found)
    key = cache_key(found)
    if stored_only and key not in read_cache(settings):
        return _by_rule(model, settings, found, "not measured on this machine yet (the service times the engines)")
    _look_at_its_load(key, settings)
    if not wait and not _kept(key, settings) and key not in _FAILED:
        _measure_in_background(key, model, settings)
        meanwhile = "the engines are being timed in the background; until then"
        return dataclasses.replace(_by_rule(model, settings, found, meanwhile), pending=key)
    results = stored_results(key, model, settings)
    best = fastest(results)
    if best is None:
        why = _FAILED.get(key) or "no engine ran a timed round"
        return _by_rule(model, settings, found, f"no measurement could be made or kept ({why.rstrip('.')})")
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


def _by_rule(model: str, settings: Settings, found: list[Candidate], why: str = "") -> AutoChoice:
    _, path = locate_model(model, settings)
    choice = choose_backend(path)
    if len(found) == 1:
        only = found[0]
        return AutoChoice(only.backend, only.device, only.model, f"the only engine here that runs it ({choice.reason})")
    prefix = f"{why}; " if why else ""
    return AutoChoice(choice.backend, choice.device, model, prefix + choice.reason)


def _measure_in_background(key: str, model: str, settings: Settings) -> None:
    with _BOOKKEEPING:
        if key in _BACKGROUND:
            return
        _BACKGROUND.add(key)
    threading.Thread(target=stored_results, args=(key, model, settings), name="auto-measure", daemon=True).start()


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


def remeasure_in_background(choice: AutoChoice, model: str, settings: Settings, why: str) -> bool:
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
    _say(f"measuring {model} again: {choice.backend}'s {why}")

    def again() -> None:
        with _MEASURING:
            try:
                measure(model, settings, say=_say)
            except EdgeError as exc:
                _say(str(exc), error=True)
        stored_results(key, model, settings)  # sets _PICKED from what is stored now

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


def _measure_now(model: str, settings: Settings) -> None:
    """Time the engines (each in a child of its own) with progress on stderr; a failure is one `error:` line, and
    the caller falls back to the ranking. The caller holds `measuring_on_this_machine`."""
    _say(f"timing the engines that can run {model} on this machine (once; kept in {cache_path(settings)})")
    _measure(model, settings, say=_say)
