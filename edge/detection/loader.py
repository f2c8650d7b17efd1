"""From what the user typed (`--model`, `--backend`, flags) to a ready Detector."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_inference.backends import (
    Backend,
    BackendOptions,
    Description,
    PixelSteps,
    describe_model,
    engine_keys,
    open_backend,
)
from edge_inference.backends.engine import check_engine_options, get_engine, serving_engine
from edge_inference.backends.isolated import IsolatedBackend
from edge_inference.backends.names import backend_named
from edge_inference.edge.detection.detector import Detector, inferences_done
from edge_inference.edge.detection.model_files import (
    check_label_file,
    locate_model,
    model_for_engine,
    model_reference,
)
from edge_inference.edge.detection.threads import CPU_ENGINES, LoopThreads, engine_threads, runs_on_cpu
from edge_inference.edge.detection.timings import process_cpu_seconds
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import Settings, get_settings
from edge_inference.models.labels import Classes
from edge_inference.models.overrides import SpecOverrides, load_sidecar, sidecar_path
from edge_inference.models.registry import is_registry_name
from edge_inference.models.resolve import ModelIO, resolve_spec
from edge_inference.models.spec import ModelSpec

if TYPE_CHECKING:
    from edge_inference.edge.detection.autoselect import AutoChoice


@dataclass(frozen=True)
class DetectorConfig:
    model: str
    backend: str = "auto"
    device: str = "auto"
    conf: float = 0.25
    iou: float = 0.45
    max_detections: int = 100
    classes: Classes = field(default_factory=dict)  # only these are reported; empty: every class
    threads: int | None = None  # None: the thread budget's share (edge/detection/threads.py)
    allow_fallback: bool = False
    overrides: SpecOverrides = field(default_factory=SpecOverrides)
    # input buffers: 1 for one frame at a time, more for a pipeline that prepares ahead
    buffers: int = 1
    # each engine's own options, by engine (`engine_options:` in a stream, `--engine-option` on the command line)
    engine_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # True: `detect` is called back to back (a loop over images or frames): without `threads`, a CPU engine starts
    # on one thread and measures whether the budget's pay (threads.py, `LoopThreads`). False: frames come at a
    # camera's pace or one at a time (the service), or are timed as such (auto, `edge bench`): the budget's threads
    back_to_back: bool = True
    # where the engine runs: auto, process (a child of its own), thread (this process); by engine where auto
    isolation: str = "auto"
    engine_isolation: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # `ONNX`, `Auto`: the engine's key in any case, as devices are read (`cpu`, `CPU`)
        object.__setattr__(self, "backend", self.backend.strip().lower())


def check_reference(config: DetectorConfig) -> None:
    """Fail now, without loading or downloading anything, on a model or backend name that cannot work."""
    backend_named(config.backend, ["auto", *engine_keys()])
    check_engine_options(config.engine_options)
    model_reference(engine_model(config))  # a registry name must also have a file this engine reads
    check_label_file(config.overrides.labels)


def engine_model(config: DetectorConfig) -> str:
    """A registry name given with an engine becomes that engine's own file of the same weights
    (`--backend tflite -m yolox-nano` runs yolox-nano-tflite); files and `auto` stay as they are."""
    if config.backend == "auto":
        return config.model
    remote = serving_engine(config.model) is not None or get_engine(config.backend).serves is not None
    if not (is_registry_name(config.model) or remote):  # a file for a file engine: checked when it is read
        return config.model
    model, reason = model_for_engine(config.model, config.backend)
    if model is None:
        raise EdgeError(f"{reason}; see `edge models list` or `edge backends` for what each engine can run")
    return model


def resolve_auto(
    config: DetectorConfig, settings: Settings, wait: bool = True, stored_only: bool = False
) -> tuple[DetectorConfig, AutoChoice]:
    """`--backend auto` made concrete (engine, device, that engine's file of the model), and the choice with the
    note saying why (its `reason`, rewritten for the user). `stored_only`: measure nothing (see `auto_choice`)."""
    from edge_inference.edge.detection.autoselect import auto_choice  # it loads detectors itself to time them

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
    progress: Callable[[str, int, int | None], None] | None = None,
    opener: Callable[[str, Path, BackendOptions], Backend] = open_backend,
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
    backend, spec = _open(replace(config, threads=1) if measured else config, settings, progress, opener)
    if note:
        backend.notes.insert(0, note)
    detector = Detector(
        backend,
        spec,
        conf=config.conf,
        iou=config.iou,
        max_detections=config.max_detections,
        buffers=config.buffers,
        classes=config.classes,
    )
    if measured and runs_on_cpu(backend) and not isinstance(backend, IsolatedBackend):
        detector.loop_threads = LoopThreads(
            backend, planned, lambda threads: _open(replace(config, threads=threads), settings, None, opener)[0]
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
        and _isolation(config) != "process"
    )


def _isolation(config: DetectorConfig) -> str:
    """Where the engine runs: the stream's `isolation:`, else the detectors' setting for its engine, else auto."""
    return config.isolation if config.isolation != "auto" else config.engine_isolation.get(config.backend, "auto")


def _open(
    config: DetectorConfig,
    settings: Settings,
    progress: Callable[[str, int, int | None], None] | None,
    opener: Callable[[str, Path, BackendOptions], Backend],
) -> tuple[Backend, ModelSpec]:
    """The engine opened on the model's file, and the model's spec. Where the engine can read the model's tensors
    without compiling it, the spec comes first and the engine is asked to take the pre-processing."""
    name, path = locate_model(engine_model(config), settings, progress)
    key = config.backend
    sidecar = sidecar_path(path)
    overrides = (load_sidecar(sidecar) if sidecar else SpecOverrides()).merged(config.overrides)
    check_label_file(overrides.labels)
    size = (overrides.width, overrides.height) if overrides.width and overrides.height else None
    threads = config.threads or engine_threads()
    own = config.engine_options.get(key, {})
    isolation = _isolation(config)
    options = BackendOptions(
        config.device,
        threads,
        config.allow_fallback,
        size,
        own,
        settings.model_cache,
        isolation=isolation,
    )
    described = _spec_before_loading(key, name, path, options, overrides)
    if described is not None:  # the engine can take the pre-processing, compiled into the model
        options = replace(options, pixels=pixel_steps(described))
    backend = opener(key, path, options)
    try:
        spec = described if described and backend.pixels else resolve_spec(name, _io(backend), overrides)
    except Exception:
        backend.close()
        raise
    return backend, spec


def _io(model: Backend | Description) -> ModelIO:
    return ModelIO(
        input_shape=model.inputs[0].shape,
        output_shapes=[o.shape for o in model.outputs],
        output_names=[o.name for o in model.outputs],
        metadata=model.metadata,
    )


def _spec_before_loading(
    key: str, name: str, path: Path, options: BackendOptions, overrides: SpecOverrides
) -> ModelSpec | None:
    """The spec, from what the model declares, for an engine that can read that without compiling it; None
    otherwise (the spec then comes from the loaded engine, as for every other)."""
    description = describe_model(key, path, options)
    if description is None or not description.inputs:
        return None
    try:
        return resolve_spec(name, _io(description), overrides)
    except Exception:  # noqa: BLE001 - resolved again after loading, where its error is reported
        return None


def pixel_steps(spec: ModelSpec) -> PixelSteps:
    """What an engine does to BGR pixels to make the model's input: the spec's colour order, mean and std."""
    pre = spec.preprocessing
    return PixelSteps(reverse_channels=pre.color == "RGB", mean=pre.mean, std=pre.std)


def _watch_live(detector: Detector, choice: AutoChoice, model: str, settings: Settings) -> Callable[[], str | None]:
    """`superseded` for a detector on a measured pick: once the service has settled (EDGE_AUTO_SETTLE_S), its CPU
    time per inference then is the figure later ones are checked against (like with like: load from elsewhere
    slows each inference down but leaves its CPU time as it was; issue 62); when they call for it the engines are
    measured again (in the background, bounded), and the new pick is named once another engine won. When this one
    won again, its note says so."""
    from edge_inference.edge.detection.autoselect import live_check, named_pick, remeasure_in_background, remeasured

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
        from edge_inference.edge.detection.autoselect import LIVE_SAMPLES

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
