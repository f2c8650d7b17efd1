"""A detector opened on one named engine: the model's file located, its spec resolved, the engine loaded.

What the user typed is made concrete before this (`loader.py`: `--backend auto`, the loop's threads, auto's
watchers); this opens what it is given, and is all auto's timing children (`auto/worker.py`) need.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from edge_inference.backends import (
    Backend,
    BackendOptions,
    PixelSteps,
    describe_model,
    open_backend,
)
from edge_inference.backends.engine import get_engine
from edge_inference.backends.options import EngineOptions
from edge_inference.edge.config.base import frozen
from edge_inference.edge.config.paths import check_label_file
from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.model_files import resolve_model
from edge_inference.edge.detection.threads import engine_threads, threads_are_cpu
from edge_inference.edge.settings import Settings
from edge_inference.models.download import ModelFile, local_file
from edge_inference.models.labels import Classes
from edge_inference.models.overrides import SpecOverrides, load_sidecar, sidecar_path
from edge_inference.models.resolve import ModelIO, resolve_spec
from edge_inference.models.spec import ModelSpec
from edge_inference.models.tiles import Tiling

Progress = Callable[[str, int, int | None], None]
Opener = Callable[[str, Path, BackendOptions], Backend]


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
    engine_options: Mapping[str, Mapping[str, Any] | EngineOptions] = field(default_factory=dict)
    # True: `detect` is called back to back (a loop over images or frames): without `threads`, a CPU engine starts
    # on one thread and measures whether the budget's pay (threads.py, `LoopThreads`). False: frames come at a
    # camera's pace or one at a time (the service), or are timed as such (auto, `edge bench`): the budget's threads
    back_to_back: bool = True
    # where the engine runs: auto, process (a child of its own), thread (this process); by engine where auto
    isolation: str = "auto"
    engine_isolation: Mapping[str, str] = field(default_factory=dict)
    load_timeout_s: float = 900.0  # an engine of its own process killed past this while loading (BackendOptions)
    tiling: Tiling | None = None  # a big frame run as overlapping tiles at the model's scale (models/tiles.py)

    def __post_init__(self) -> None:
        # `ONNX`, `Auto`: the engine's key in any case, as devices are read (`cpu`, `CPU`)
        object.__setattr__(self, "backend", self.backend.strip().lower())
        for name in ("classes", "engine_options", "engine_isolation"):  # a plan holds it: nothing may change them
            object.__setattr__(self, name, frozen(dict(getattr(self, name))))


def spec_overrides(
    decoder: str | None, color: str | None, resize: str | None, labels: str | Path | None
) -> SpecOverrides:
    """What a stream's config or the command line says of a model its file does not: one reading for both."""
    return SpecOverrides.model_validate(
        {"decoder": decoder, "color": color, "resize": resize, "labels": str(labels) if labels else None}
    )


def isolation_of(config: DetectorConfig) -> str:
    """Where the engine runs: the stream's `isolation:`, else the detectors' setting for its engine, else auto."""
    return config.isolation if config.isolation != "auto" else config.engine_isolation.get(config.backend, "auto")


@dataclass(frozen=True)
class Opening:
    """A detector made concrete before its engine opens: the engine's model file located (pulled and checked
    once), the sidecar read, the engine's typed options. Opening it again (another thread count, a reload) goes
    back to none of that."""

    config: DetectorConfig
    name: str
    path: Path
    overrides: SpecOverrides
    options: BackendOptions
    # a loop running frames back to back on a CPU engine, threads not the user's: it starts on one thread and
    # measures whether these, the budget's, pay (`LoopThreads`); None otherwise
    loop_threads: int | None = None

    def with_threads(self, threads: int) -> Opening:
        return replace(
            self, config=replace(self.config, threads=threads), options=replace(self.options, threads=threads)
        )


def plan_opening(
    config: DetectorConfig, file: ModelFile, settings: Settings, progress: Progress | None = None
) -> Opening:
    """`config` (its engine named, not `auto`) made concrete on `file`, the engine's own file of the model as the
    plan resolved it: what opening it reads and passes to the engine."""
    planned = config.threads or engine_threads()
    measured = (
        config.back_to_back
        and not config.threads
        and planned > 1
        and threads_are_cpu(config.backend)
        and isolation_of(config) != "process"
    )
    config = replace(config, threads=1) if measured else config
    path = local_file(file, settings.model_cache, settings.model_mirror, progress)
    sidecar = sidecar_path(path)
    overrides = (load_sidecar(sidecar) if sidecar else SpecOverrides()).merged(config.overrides)
    check_label_file(overrides.labels)
    size = (overrides.width, overrides.height) if overrides.width and overrides.height else None
    key = config.backend
    options = BackendOptions(
        config.device,
        config.threads or engine_threads(),
        config.allow_fallback,
        size,
        get_engine(key).parse_options(config.engine_options.get(key, {})),  # typed, as the engine's load takes it
        settings.model_cache,
        isolation=isolation_of(config),
        load_deadline_s=config.load_timeout_s,
    )
    return Opening(config, file.name, path, overrides, options, planned if measured else None)


def open_detector(
    config: DetectorConfig, settings: Settings, progress: Progress | None = None, opener: Opener = open_backend
) -> Detector:
    """A Detector on `config`'s engine (named: not `auto`), with its thresholds and classes."""
    files = resolve_model(config.model, [config.backend], settings, strict=True)
    return detector_of(plan_opening(config, files.engines[config.backend], settings, progress), opener)


def detector_of(opening: Opening, opener: Opener = open_backend) -> Detector:
    backend, spec = open_engine(opening, opener)
    config = opening.config
    return Detector(
        backend,
        spec,
        conf=config.conf,
        iou=config.iou,
        max_detections=config.max_detections,
        buffers=config.buffers,
        classes=config.classes,
        tiling=config.tiling,
    )


def open_engine(opening: Opening, opener: Opener = open_backend) -> tuple[Backend, ModelSpec]:
    """The engine opened on the model's file, and the model's spec. Where the engine can read the model's tensors
    without compiling it, the spec comes first and the engine is asked to take the pre-processing."""
    key, name, path, options, overrides = (
        opening.config.backend,
        opening.name,
        opening.path,
        opening.options,
        opening.overrides,
    )
    described = _spec_before_loading(key, name, path, options, overrides)
    if described is not None:  # the engine can take the pre-processing, compiled into the model
        pre = described.preprocessing  # what the engine does to BGR pixels to make the model's input
        options = replace(options, pixels=PixelSteps(reverse_channels=pre.color == "RGB", mean=pre.mean, std=pre.std))
    backend = opener(key, path, options)
    try:
        spec = described if described and backend.pixels else resolve_spec(name, ModelIO.of(backend), overrides)
    except Exception:
        backend.close()
        raise
    return backend, spec


def _spec_before_loading(
    key: str, name: str, path: Path, options: BackendOptions, overrides: SpecOverrides
) -> ModelSpec | None:
    """The spec, from what the model declares, for an engine that can read that without compiling it; None
    otherwise (the spec then comes from the loaded engine, as for every other)."""
    description = describe_model(key, path, options)
    if description is None or not description.inputs:
        return None
    try:
        return resolve_spec(name, ModelIO.of(description), overrides)
    except Exception:  # noqa: BLE001 - resolved again after loading, where its error is reported
        return None
