"""What a detector on auto's pick watches for: the measured pick, when it started on a provisional one; or, on a
measured pick, whether the service's own CPU per frame calls for measuring again (`Detector.superseded`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from edge_inference.edge.detection.auto.choice import (
    AutoChoice,
    live_check,
    named_pick,
    remeasure_in_background,
    remeasured,
)
from edge_inference.edge.detection.detector import Detector, inferences_done
from edge_inference.edge.detection.model_files import ModelFiles
from edge_inference.edge.detection.timings import process_cpu_seconds
from edge_inference.edge.settings import Settings

# Live inferences in a figure the live check compares. It compares the service's CPU per frame with its own once
# it has run EDGE_AUTO_SETTLE_S (180 s): seven streams starting, engines warming and auto's own first measurement
# made a quiet measurement look 5.3x slower in the first 10 s
LIVE_SAMPLES = 100


def watch(
    detector: Detector, choice: AutoChoice, files: ModelFiles, settings: Settings
) -> Callable[[], str | None] | None:
    """The detector's `superseded` on auto's `choice`: the measurement it waits for, or the live check of a
    measured pick; None for a choice with nothing to watch (the ranking's, a model on a server)."""
    if choice.pending:
        return _watch_measurement(detector, choice, files.model)
    if choice.timing is not None:
        return _watch_live(detector, choice, files, settings)
    return None


def _watch_live(
    detector: Detector, choice: AutoChoice, files: ModelFiles, settings: Settings
) -> Callable[[], str | None]:
    """`superseded` for a detector on a measured pick: once the service has settled (EDGE_AUTO_SETTLE_S), its CPU
    time per inference then is the figure later ones are checked against (like with like: load from elsewhere
    slows each inference down but leaves its CPU time as it was; issue 62); when they call for it the engines are
    measured again (in the background, bounded), and the new pick is named once another engine won. When this one
    won again, its note says so."""
    model = files.model
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
            asked = why is not None and remeasure_in_background(choice, files, settings, why)
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
