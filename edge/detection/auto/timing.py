"""Timing the engines: each candidate in a child process of its own (`worker.py`), driven round by round, in turns."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from edge_inference.backends import brief
from edge_inference.edge.detection.auto.figures import BUSY_CORES, CHILD_STOP_S, ROUNDS, Candidate, Measurement, Say
from edge_inference.edge.detection.auto.lock import measuring_on_this_machine
from edge_inference.edge.detection.auto.store import cache_key, write_cache
from edge_inference.edge.detection.machine import OthersLoad
from edge_inference.edge.errors import EdgeError, counted
from edge_inference.edge.settings import Settings

WORKER = "edge_inference.edge.detection.auto.worker"  # each child: its module, run by this interpreter


def measure(
    found: list[Candidate],
    model: str,
    settings: Settings,
    say: Say | None = None,
    frames: list[np.ndarray] | None = None,
) -> tuple[str, list[Measurement]]:
    """Time every candidate (`candidates.py`) in turns, each in a child process loaded within the budget, and
    store the results; (cache key, results). `frames`: the frames to time on, decoded by the caller (a fixed noise
    image when none)."""
    with measuring_on_this_machine(settings, say, len(found)):
        return measure_unlocked(found, model, settings, say, frames)


def measure_unlocked(
    found: list[Candidate],
    model: str,
    settings: Settings,
    say: Say | None = None,
    frames: list[np.ndarray] | None = None,
) -> tuple[str, list[Measurement]]:
    """`measure` for the caller that holds the machine's measuring lock, on the candidates it found."""
    if not found:
        raise EdgeError(f"no installed engine can run {model}; see `edge backends` for how to install one")
    budget = settings.auto_budget_s  # per engine: load and warm up (a Pi 4 does yolox-nano in seconds)
    say = say or (lambda _line: None)
    started, others = {}, OthersLoad()
    with tempfile.TemporaryDirectory(prefix="edge-auto-") as folder:
        saved = _saved_frames(frames, Path(folder)) if frames else None
        try:
            for number, candidate in enumerate(found, 1):  # all load at once: the slowest load bounds the wait
                which = f"{candidate.backend} ({candidate.device}), {number} of {len(found)}"
                say(f"loading {which}, at most {budget:g} s...")
                started[candidate] = _Timed(candidate, saved)
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


def _saved_frames(frames: list[np.ndarray], folder: Path) -> Path:
    """The frames in one file every child reads (decoded once here; a child cannot reach the sources' layer)."""
    path = folder / "frames.npz"
    named: dict[str, Any] = {f"frame{index}": frame for index, frame in enumerate(frames)}
    np.savez(path, **named)
    return path


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
    """One candidate's child process (`worker.py`), driven round by round."""

    def __init__(self, candidate: Candidate, frames: Path | None) -> None:
        self.candidate = candidate
        command = [sys.executable, "-m", WORKER, "--candidate", json.dumps(asdict(candidate))]
        command += ["--frames", str(frames)] if frames else []
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
