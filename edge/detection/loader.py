"""From what the user typed (`--model`, `--backend`, flags) to a ready Detector."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from edge_inference.backends import open_backend
from edge_inference.backends.engine import check_engine_options, serving_engine
from edge_inference.backends.isolated import IsolatedBackend
from edge_inference.edge.detection.detector import Detector, inferences_done
from edge_inference.edge.detection.opening import (
    DetectorConfig,
    Opener,
    Progress,
    check_reference,
    detector_of,
    isolation_of,
    open_engine,
    plan_opening,
)
from edge_inference.edge.detection.threads import CPU_ENGINES, LoopThreads, engine_threads, runs_on_cpu
from edge_inference.edge.detection.timings import process_cpu_seconds
from edge_inference.edge.settings import Settings, get_settings

if TYPE_CHECKING:
    from edge_inference.edge.detection.auto.choice import AutoChoice

# What the loader's callers import from it: a config, its check, and `load_detector`
__all__ = ["DetectorConfig", "LiveWindow", "check_reference", "load_detector", "resolve_auto"]


def resolve_auto(
    config: DetectorConfig, settings: Settings, wait: bool = True, stored_only: bool = False
) -> tuple[DetectorConfig, AutoChoice]:
    """`--backend auto` made concrete (engine, device, that engine's file of the model), and the choice with the
    note saying why (its `reason`, rewritten for the user). `stored_only`: measure nothing (see `auto_choice`)."""
    from edge_inference.edge.detection.auto.choice import auto_choice  # it loads detectors itself to time them

    measure = config.device == "auto"
    choice = auto_choice(config.model, settings, measure=measure, wait=wait, stored_only=stored_only)
    # a family name means each engine's own file of it: say which one runs
    which = f" ({choice.model})" if choice.model != config.model else ""
    if config.device == "auto":
        note = f"--backend auto chose {choice.backend} on {choice.device}{which}: {choice.reason}"
    else:  # the device was the user's: the choice's own device reasoning would contradict what runs
        note = f"--backend auto chose {choice.backend}{which} for {config.model}"
    device = choice.device if config.device == "auto" else config.device
    return replace(config, model=choice.model, backend=choice.backend, device=device), replace(choice, reason=note)


def load_detector(
    config: DetectorConfig,
    settings: Settings | None = None,
    progress: Progress | None = None,
    opener: Opener = open_backend,
    wait_for_auto: bool = True,
) -> Detector:
    """`opener` opens the engine: `open_backend`, or a detector pool's, which hands out shared engines. Without
    `wait_for_auto`, `--backend auto` does not wait for a measurement still to make: the detector runs on the
    ranking's choice and says, through `superseded`, when the measured pick is another engine."""
    settings = settings or get_settings()
    check_engine_options(config.engine_options)  # every block, also those of engines not loaded now
    note, choice, asked_for = None, None, config.model
    served = serving_engine(config.model) if config.backend == "auto" else None
    if served is not None:  # the reference names its engine: nothing to measure, no other engine to run it
        config = replace(config, backend=served.key)
        note = f"--backend auto chose {served.key}: the model is on a server"
    elif config.backend == "auto":
        config, choice = resolve_auto(config, settings, wait_for_auto)
        note = choice.reason
    planned = config.threads or engine_threads()
    measured = _loop_measures_threads(config, planned)
    opening = plan_opening(replace(config, threads=1) if measured else config, settings, progress)
    detector = detector_of(opening, opener)
    backend = detector.backend
    if note:
        backend.notes.insert(0, note)
    if measured and runs_on_cpu(backend) and not isinstance(backend, IsolatedBackend):
        # another thread count opens the same located file again: nothing is resolved a second time
        detector.loop_threads = LoopThreads(
            backend, planned, lambda threads: open_engine(opening.with_threads(threads), opener)[0]
        )
    if choice is not None and choice.pending:
        detector.superseded = _watch_measurement(detector, choice, asked_for)
    elif choice is not None and choice.timing is not None:
        detector.superseded = _watch_live(detector, choice, asked_for, settings)
    return detector


def _loop_measures_threads(config: DetectorConfig, planned: int) -> bool:
    """A loop running frames back to back on a CPU engine in this process, threads not the user's: it starts on
    one thread and measures whether the budget's pay (`LoopThreads`)."""
    return (
        config.back_to_back
        and not config.threads
        and planned > 1
        and config.backend in CPU_ENGINES
        and isolation_of(config) != "process"
    )


def _watch_live(detector: Detector, choice: AutoChoice, model: str, settings: Settings) -> Callable[[], str | None]:
    """`superseded` for a detector on a measured pick: once the service has settled (EDGE_AUTO_SETTLE_S), its CPU
    time per inference then is the figure later ones are checked against (like with like: load from elsewhere
    slows each inference down but leaves its CPU time as it was; issue 62); when they call for it the engines are
    measured again (in the background, bounded), and the new pick is named once another engine won. When this one
    won again, its note says so."""
    from edge_inference.edge.detection.auto.choice import live_check, named_pick, remeasure_in_background, remeasured

    asked, since = False, time.monotonic()
    window = LiveWindow()

    def superseded() -> str | None:
        nonlocal asked
        if not asked:
            if time.monotonic() - since < settings.auto_settle_s:
                return None
            if not window.opened:  # start-up's costs (warming, auto's first measurement) stay out of the figure
                window.restart()
                return None
            if (cpu_ms := window.cpu_ms_per_inference()) is None:
                return None
            if window.settled_ms is None:
                window.settled_ms = cpu_ms  # this service's own cost, once it has settled
                return None
            why = live_check(choice, cpu_ms, window.settled_ms)
            asked = why is not None and remeasure_in_background(choice, model, settings, why)
            return None
        picked = remeasured(choice)
        if picked is False:
            return None  # still measuring
        if isinstance(picked, tuple) and picked != (choice.backend, choice.device):
            return named_pick(picked)
        detector.backend.notes[0:1] = [
            f"--backend auto chose {choice.backend} on {choice.device}: fastest here when measured again "
            f"(the service's CPU time per frame had grown; `edge backends --bench {model}` shows the figures)"
        ]
        asked, window.settled_ms = False, None
        window.restart()
        return None

    return superseded


class LiveWindow:
    """The process's CPU seconds per inference over windows of LIVE_SAMPLES inferences or more (every detector's,
    with decoding and clients: the service's cost per frame, which another program's load does not raise)."""

    def __init__(self) -> None:
        self.settled_ms: float | None = None
        self.opened = False
        self._start = (0.0, 0)

    def restart(self) -> None:
        self._start, self.opened = (process_cpu_seconds(), inferences_done()), True

    def cpu_ms_per_inference(self) -> float | None:
        """The figure of the window now ended, or None while it has too few inferences."""
        from edge_inference.edge.detection.auto.choice import LIVE_SAMPLES

        cpu, done = process_cpu_seconds(), inferences_done()
        if done - self._start[1] < LIVE_SAMPLES:
            return None
        figure = (cpu - self._start[0]) * 1e3 / (done - self._start[1])
        self._start = (cpu, done)
        return figure


def _watch_measurement(detector: Detector, choice: AutoChoice, model: str) -> Callable[[], str | None]:
    """`superseded` for a detector on auto's provisional choice: the engine measured faster, once one was; when
    this one won, its note says so from then on."""

    def superseded() -> str | None:
        if not choice.measured:
            return None
        if faster := choice.superseded():
            return faster
        notes = detector.backend.notes
        settled = f"--backend auto chose {choice.backend} on {choice.device}: fastest here when measured"
        notes[0:1] = [f"{settled} (`edge backends --bench {model}` shows the figures)"]
        detector.superseded = lambda: None
        return None

    return superseded
