"""From what the user typed (`--model`, `--backend`, flags) to a ready Detector: the names, options and label file
checked and the model reference resolved once (`check_reference`, or the plan's), `--backend auto` decided on it
(`auto/decide.py`), the opening planned on the engine's own file (`opening.py`), then opened, with the loop's thread
measurement and auto's watcher attached."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_inference.backends import engine_keys, open_backend
from edge_inference.backends.engine import check_engine_options
from edge_inference.backends.isolated import IsolatedBackend
from edge_inference.backends.names import backend_named
from edge_inference.edge.config.paths import check_label_file
from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.model_files import ModelFiles, resolve_model
from edge_inference.edge.detection.opening import (
    DetectorConfig,
    Opener,
    Progress,
    detector_of,
    open_engine,
    plan_opening,
)
from edge_inference.edge.detection.threads import LoopThreads, runs_on_cpu
from edge_inference.edge.settings import Settings, get_settings

if TYPE_CHECKING:
    from edge_inference.edge.detection.auto.choice import AutoChoice

# What the loader's callers import from it: a config, its check, and `load_detector`
__all__ = ["DetectorConfig", "check_reference", "load_detector"]


def load_detector(
    config: DetectorConfig,
    settings: Settings | None = None,
    progress: Progress | None = None,
    opener: Opener = open_backend,
    wait_for_auto: bool = True,
    files: ModelFiles | None = None,
) -> Detector:
    """`opener` opens the engine: `open_backend`, or a detector pool's, which hands out shared engines. `files`:
    the model as the plan resolved it (`check_reference`); resolved here when not given. Without `wait_for_auto`,
    `--backend auto` does not wait for a measurement still to make: the detector runs on the ranking's choice and
    says, through `superseded`, when the measured pick is another engine."""
    settings = settings or get_settings()
    files = files or check_reference(config, settings)
    choice: AutoChoice | None = None
    if config.backend == "auto":
        from edge_inference.edge.detection.auto.decide import decide_auto  # it loads detectors itself to time them

        config, choice = decide_auto(config, files, settings, wait_for_auto)
    opening = plan_opening(config, files.engines[config.backend], settings, progress)
    detector = detector_of(opening, opener)
    backend = detector.backend
    if opening.loop_threads and runs_on_cpu(backend) and not isinstance(backend, IsolatedBackend):
        # another thread count opens the same located file again: nothing is resolved a second time
        detector.loop_threads = LoopThreads(
            backend, opening.loop_threads, lambda threads: open_engine(opening.with_threads(threads), opener)[0]
        )
    if choice is not None:
        from edge_inference.edge.detection.auto.watch import watch

        backend.notes.insert(0, choice.reason)
        detector.superseded = watch(detector, choice, files, settings) or detector.superseded
    return detector


def check_reference(config: DetectorConfig, settings: Settings | None = None) -> ModelFiles:
    """Fail now, without loading or downloading anything, on a model, engine, option or label file that cannot
    work; what the model means for its engine (for every engine, with `auto`), for the plan to hold."""
    check_label_file(config.overrides.labels)
    backend_named(config.backend, ["auto", *engine_keys()])
    check_engine_options(config.engine_options)
    named = config.backend != "auto"
    return resolve_model(config.model, [config.backend] if named else engine_keys(), settings, strict=named)
