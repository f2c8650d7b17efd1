"""From what the user typed (`--model`, `--backend`, flags) to a ready Detector."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edge_inference.backends import BackendError, BackendOptions, Engine, engine_keys, get_engine, open_backend
from edge_inference.backends.discovery import choose_backend
from edge_inference.edge.detector import Detector
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import Settings, get_settings
from edge_inference.models.download import Progress, check_cached, is_cached, pull
from edge_inference.models.overrides import SpecOverrides, load_sidecar, sidecar_path
from edge_inference.models.registry import REGISTRY, RegistryEntry, entry_for_engine, get_entry, is_registry_name
from edge_inference.models.resolve import ModelIO, resolve_spec

MODEL_SUFFIXES = {".onnx", ".tflite", ".xml"}


@dataclass(frozen=True)
class DetectorConfig:
    model: str
    backend: str = "auto"
    device: str = "auto"
    conf: float = 0.25
    iou: float = 0.45
    max_detections: int = 100
    threads: int | None = None
    allow_fallback: bool = False
    overrides: SpecOverrides = field(default_factory=SpecOverrides)
    # input buffers: 1 for one frame at a time, more for a pipeline that prepares ahead
    buffers: int = 1


def model_reference(model: str) -> RegistryEntry | Path:
    """What `--model` names: a registry entry or an existing model file; one clear error otherwise."""
    if model in REGISTRY:
        return get_entry(model)
    path = Path(model).expanduser()
    if path.is_file():
        return path
    if path.suffix.lower() in MODEL_SUFFIXES or "/" in model:
        raise EdgeError(f"model file {model} does not exist")
    return get_entry(model)  # raises the "unknown registry name" message, with the names it knows


def check_reference(config: DetectorConfig) -> None:
    """Fail now, without loading or downloading anything, on a model or backend name that cannot work."""
    if config.backend != "auto" and config.backend not in engine_keys():
        raise BackendError(f"unknown backend {config.backend!r}; choose one of: auto, {', '.join(engine_keys())}")
    model_reference(engine_model(config))  # a registry name must also have a file this engine reads


def model_for_engine(model: str, backend: str) -> tuple[str | None, str | None]:
    """(what `backend` should load for `model`, None), or (None, why it cannot run it).

    A registry name or family picks the family member in the engine's own format; a file must be one it reads.
    """
    engine = get_engine(backend)
    if is_registry_name(model):
        entry = entry_for_engine(model, lambda e: runs_entry(engine, e), engine.formats)
        if entry is None:
            return None, f"the registry has no {model} file that {backend} can run"
        return entry.name, None
    path = Path(model)
    if not path.is_file():
        return None, f"{model} is neither a registry model nor a file"
    if not engine.reads(path.name):
        return None, f"{backend} reads {', '.join(engine.formats)} files, not {path.name}"
    return model, None


def runs_entry(engine: Engine, entry: RegistryEntry) -> bool:
    """The engine reads the entry's file format, and the registry knows of no reason it cannot run it."""
    allowed = entry.only_engines is None or engine.key in entry.only_engines
    return allowed and engine.reads(entry.model_file.path)


def engine_model(config: DetectorConfig) -> str:
    """A registry name given with an engine becomes that engine's own file of the same weights
    (`--backend tflite -m yolox-nano` runs yolox-nano-tflite); files and `auto` stay as they are."""
    if config.backend == "auto" or not is_registry_name(config.model):
        return config.model
    model, reason = model_for_engine(config.model, config.backend)
    if model is None:
        raise EdgeError(f"{reason}; see `edge models list` or `edge backends` for what each engine can run")
    return model


def locate_model(model: str, settings: Settings, progress: Progress | None = None) -> tuple[str, Path]:
    """A registry name (pulled into the cache when missing) or a path to a model file -> (name, path)."""
    reference = model_reference(model)
    if isinstance(reference, Path):
        return reference.stem, reference
    if not is_cached(reference, settings.model_cache):
        pull(reference, settings.model_cache, settings.model_mirror, progress)
    return reference.name, check_cached(reference, settings.model_cache)  # a few ms of sha256 against a swapped file


def load_detector(
    config: DetectorConfig,
    settings: Settings | None = None,
    progress: Callable[[str, int, int | None], None] | None = None,
) -> Detector:
    settings = settings or get_settings()
    name, path = locate_model(engine_model(config), settings, progress)
    key, device, note = config.backend, config.device, None
    if key == "auto":
        choice = choose_backend(path)
        key = choice.backend
        if config.device == "auto":
            device, note = choice.device, f"--backend auto chose {key} on {choice.device}: {choice.reason}"
        else:  # the device was the user's: the choice's own device reasoning would contradict what runs
            note = f"--backend auto chose {key} for {path.name}"
    sidecar = sidecar_path(path)
    overrides = (load_sidecar(sidecar) if sidecar else SpecOverrides()).merged(config.overrides)
    size = (overrides.width, overrides.height) if overrides.width and overrides.height else None
    backend = open_backend(key, path, BackendOptions(device, config.threads, config.allow_fallback, size))
    if note:
        backend.notes.insert(0, note)
    io = ModelIO(
        input_shape=backend.inputs[0].shape,
        output_shapes=[o.shape for o in backend.outputs],
        output_names=[o.name for o in backend.outputs],
        metadata=backend.metadata,
    )
    try:
        spec = resolve_spec(name, io, overrides)
    except Exception:
        backend.close()
        raise
    return Detector(
        backend, spec, conf=config.conf, iou=config.iou, max_detections=config.max_detections, buffers=config.buffers
    )
