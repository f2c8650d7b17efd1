"""Which model file a name means: a registry entry (pulled into the cache) or a file, and each engine's own file
of a registry family. Nothing here loads an engine."""

from __future__ import annotations

from pathlib import Path

from edge_inference.backends import Engine, engines, get_engine
from edge_inference.backends.engine import serving_engine
from edge_inference.edge.config.paths import with_path_meant
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import Settings, get_settings
from edge_inference.models.download import LFS_POINTER, Progress, check_cached, is_cached, pull
from edge_inference.models.registry import REGISTRY, RegistryEntry, entry_for_engine, get_entry, is_registry_name

MODEL_SUFFIXES = {".onnx", ".tflite", ".xml"}
CONVERTED = "converted"  # `edge models convert`'s files, under the model cache, found by their names
CONVERTED_SUFFIXES = (".onnx", ".xml", ".tflite", ".rknn")


def converted_folder(settings: Settings | None = None) -> Path:
    return (settings or get_settings()).model_cache / CONVERTED


def converted_model(name: str, settings: Settings | None = None) -> Path | None:
    """The file `edge models convert` made under this name (`yolox-nano-int8`), if there is one."""
    if not name or "/" in name or Path(name).suffix in MODEL_SUFFIXES:
        return None
    folder = converted_folder(settings)
    return next((p for p in (folder / f"{name}{suffix}" for suffix in CONVERTED_SUFFIXES) if p.is_file()), None)


def model_reference(model: str) -> RegistryEntry | Path:
    """What `--model` names: a registry entry, an existing model file or a model on a server (its engine checks the
    reference when it opens it); one clear error otherwise."""
    if serving_engine(model) is not None:
        return Path(model)
    if model in REGISTRY:
        return get_entry(model)
    converted = converted_model(model)
    if converted is not None:
        return converted
    path = Path(model).expanduser()
    if path.is_file():
        check_model_file(path)
        return path
    foreign = _foreign(path.name)
    if foreign:  # `yolov8n.pt`, as Ultralytics takes it and fetches it: no file here, and none an engine reads
        what, instead = foreign
        raise EdgeError(
            f"model file {model} does not exist; and {path.name} is {what}, which no engine here runs: {instead}"
        )
    if path.suffix.lower() in MODEL_SUFFIXES or "/" in model:
        raise EdgeError(with_path_meant(f"model file {model} does not exist", path))
    return get_entry(model)  # raises the "unknown registry name" message, with the nearest names


_EXPORT_ONNX = "export it to ONNX and give the .onnx"
# Files users bring that no engine here reads: what each is, and the way to a file one does
FOREIGN_FILES = {
    (".pt", ".pth", ".torchscript"): (
        "a PyTorch checkpoint",
        f"{_EXPORT_ONNX} (Ultralytics: yolo export model=FILE format=onnx; YOLOv5: python export.py --weights FILE "
        "--include onnx; YOLOX: python tools/export_onnx.py)",
    ),
    (".engine", ".trt", ".plan"): (
        "a TensorRT engine, built for one GPU and one TensorRT version",
        "give the ONNX model it was built from with --device tensorrt: the engine is built for this GPU and kept",
    ),
    (".safetensors",): ("weights without the network that uses them", _EXPORT_ONNX),
    (".h5", ".keras", ".pb"): ("a TensorFlow/Keras model", "convert it to TFLite (tf.lite.TFLiteConverter) or ONNX"),
    (".mlmodel", ".mlpackage"): ("a Core ML model, which runs on Apple devices", _EXPORT_ONNX),
    (".pdmodel", ".pdiparams"): ("a PaddlePaddle model", f"{_EXPORT_ONNX} (paddle2onnx)"),
    (".param",): ("an ncnn model", f"{_EXPORT_ONNX} from the model's source"),
    (".bin",): ("weights alone (OpenVINO's, or ncnn's)", "give the OpenVINO .xml beside it, or an .onnx or .tflite"),
    (".zip", ".tar", ".gz", ".tgz", ".xz", ".7z"): ("an archive", "unpack it and give the model file inside"),
}


def check_model_file(path: Path) -> None:
    """A file that is not a model this project runs, said with what it is and what to give instead, before any
    engine reads it (or `auto` times engines on it)."""
    with path.open("rb") as file:
        head = file.read(len(LFS_POINTER))
    if head == LFS_POINTER:
        raise EdgeError(
            f"{path} is a Git LFS pointer ({path.stat().st_size} bytes), not the model: run `git lfs pull` in the "
            "repository it came from (with git-lfs installed), or download the file itself from its web page"
        )
    if any(engine.reads(path.name) for engine in engines().values()):
        return
    foreign = _foreign(path.name)
    if foreign:
        raise EdgeError(f"{path} is {foreign[0]}, which no engine here runs: {foreign[1]}")


def check_label_file(labels: str | None) -> None:
    """A label file (`--labels`, `labels:`, a sidecar's) that is not there, said with the file most likely meant,
    before an engine is loaded for nothing."""
    if labels is None:
        return
    path = Path(labels).expanduser()
    if not path.is_file():
        what = "is a folder, not a label file" if path.is_dir() else "does not exist"
        raise EdgeError(with_path_meant(f"label file {labels} {what}", path))


def _foreign(name: str) -> tuple[str, str] | None:
    """What a file of another framework is, and what to give instead; None for any other name."""
    for suffixes, (what, instead) in FOREIGN_FILES.items():
        if name.lower().endswith(suffixes):
            return what, instead.replace("FILE", name)
    return None


def model_for_engine(model: str, backend: str) -> tuple[str | None, str | None]:
    """(what `backend` should load for `model`, None), or (None, why it cannot run it).

    A registry name or family picks the family member in the engine's own format; a file must be one it reads.
    """
    engine = get_engine(backend)
    served = serving_engine(model)
    if served is not None or engine.serves is not None:
        return _served_by(model, engine, served)
    if is_registry_name(model):
        entry = entry_for_engine(model, lambda e: runs_entry(engine, e), engine.formats)
        if entry is None:
            return None, f"the registry has no {model} file that {backend} can run"
        return entry.name, None
    path = converted_model(model) or Path(model).expanduser()
    if not path.is_file():
        return None, f"{model} is neither a registry model nor a file"
    if not engine.reads(path.name):
        return None, f"{backend} reads {', '.join(engine.formats)} files, not {path.name}"
    return model, None


def _served_by(model: str, engine: Engine, served: Engine | None) -> tuple[str | None, str | None]:
    """A model on a server runs on that server's engine only, and such an engine runs nothing but them."""
    if served is not None and served.key == engine.key:
        return model, None
    if served is not None:
        return None, f"{model} is a model on a server: backend {served.key} (or auto) runs it, not {engine.key}"
    return None, (
        f"{engine.key} runs models on a server, not {model}: give --model triton://HOST:PORT/NAME (`edge models "
        "export-triton MODEL DIR` writes the server's model repository)"
    )


def served_model_name(model: str) -> str:
    """The model's name in a server's reference (`.../yolox_nano/2` -> yolox_nano): what a file's stem is to a file."""
    parts = model.rstrip("/").split("/")
    return parts[-2] if parts[-1].isdigit() and len(parts) > 1 else parts[-1]


def runs_entry(engine: Engine, entry: RegistryEntry) -> bool:
    """The engine reads the entry's file format, and the registry knows of no reason it cannot run it."""
    allowed = entry.only_engines is None or engine.key in entry.only_engines
    return allowed and engine.reads(entry.model_file.path)


def locate_model(model: str, settings: Settings, progress: Progress | None = None) -> tuple[str, Path]:
    """A registry name (pulled into the cache when missing) or a path to a model file -> (name, path)."""
    if serving_engine(model) is not None:
        return served_model_name(model), Path(model)  # the engine reads the reference back from the path
    reference = model_reference(model)
    if isinstance(reference, Path):
        return reference.stem, reference
    if not is_cached(reference, settings.model_cache):
        pull(reference, settings.model_cache, settings.model_mirror, progress)
    return reference.name, check_cached(reference, settings.model_cache)  # a few ms of sha256 against a swapped file


def engine_file_name(model: str, backend: str) -> str:
    """A registry name given with an engine becomes that engine's own file of the same weights
    (`--backend tflite -m yolox-nano` runs yolox-nano-tflite); files and `auto` stay as they are."""
    if backend == "auto":
        return model
    remote = serving_engine(model) is not None or get_engine(backend).serves is not None
    if not (is_registry_name(model) or remote):  # a file for a file engine: checked when it is read
        return model
    name, reason = model_for_engine(model, backend)
    if name is None:
        raise EdgeError(f"{reason}; see `edge models list` or `edge backends` for what each engine can run")
    return name


def model_file(model: str, backend: str, settings: Settings, progress: Progress | None = None) -> tuple[str, Path]:
    """What a model reference means for an engine, decided in this one place: a model on a server (its reference),
    a registry name (the engine's own file of its family, pulled into the cache and checked), a file `edge models
    convert` made (by its name), or a file; (name, path)."""
    return locate_model(engine_file_name(model, backend), settings, progress)
