"""Which model file a name means: a registry entry (pulled into the cache) or a file, and each engine's own file
of a registry family. Nothing here loads an engine."""

from __future__ import annotations

from pathlib import Path

from edge_inference.backends import Engine, get_engine
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import Settings
from edge_inference.models.download import Progress, check_cached, is_cached, pull
from edge_inference.models.registry import REGISTRY, RegistryEntry, entry_for_engine, get_entry, is_registry_name

MODEL_SUFFIXES = {".onnx", ".tflite", ".xml"}


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


def locate_model(model: str, settings: Settings, progress: Progress | None = None) -> tuple[str, Path]:
    """A registry name (pulled into the cache when missing) or a path to a model file -> (name, path)."""
    reference = model_reference(model)
    if isinstance(reference, Path):
        return reference.stem, reference
    if not is_cached(reference, settings.model_cache):
        pull(reference, settings.model_cache, settings.model_mirror, progress)
    return reference.name, check_cached(reference, settings.model_cache)  # a few ms of sha256 against a swapped file
