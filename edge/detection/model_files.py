"""Which model file a name means: a registry entry (pulled into the cache) or a file, and each engine's own file
of a registry family, decided once (`resolve_model`) into what the plan holds. Nothing here loads an engine."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from edge_inference.backends import Engine, engines
from edge_inference.edge.config.base import FrozenMap
from edge_inference.edge.config.paths import with_path_meant
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import Settings, get_settings
from edge_inference.models.download import LFS_POINTER, ModelFile, Progress, local_file
from edge_inference.models.errors import ModelError
from edge_inference.models.registry import REGISTRY, RegistryEntry, get_entry

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


def converted_names(settings: Settings | None = None) -> list[str]:
    """The names `edge models convert` made, as `--model` takes them."""
    folder = converted_folder(settings)
    files = folder.iterdir() if folder.is_dir() else iter(())
    return sorted(p.stem for p in files if p.suffix in CONVERTED_SUFFIXES and not p.name.startswith("."))


@dataclass(frozen=True)
class ModelFiles:
    """A model reference resolved once, nothing downloaded: the reference itself, and each engine asked about with
    its own file of the model or why it cannot run it. A stream's plan holds this; opening its detector and auto's
    candidates read it, and neither resolves the name again."""

    model: str
    given: ModelFile
    engines: Mapping[str, ModelFile]
    refused: Mapping[str, str]
    served_by: str | None = None  # the engine whose server the reference names (`triton://...`): it alone runs it

    def __post_init__(self) -> None:  # a plan holds it: read-only all the way down
        object.__setattr__(self, "engines", FrozenMap(self.engines))
        object.__setattr__(self, "refused", FrozenMap(self.refused))


def resolve_model(
    model: str, keys: Sequence[str], settings: Settings | None = None, strict: bool = False
) -> ModelFiles:
    """What `model` means, and for each engine in `keys` its own file of it (a registry family's member in the
    engine's format, or the file if it reads it). With `strict` (an engine the user named), one it cannot run is
    an error now, before anything loads or downloads.

    The one place a model reference is read (issue 61): the engines and the registry are looked at once, here,
    and the decision made from what they hold; only an unknown name goes back to the registry, for its line."""
    local = _local_file(model, settings)
    installed = engines()  # looked at once: `serving_engine`'s test, on this mapping
    served = next((e for e in installed.values() if e.serves is not None and e.serves(model)), None)
    asked = {key: installed[key] for key in keys}
    family = _family(model)
    members = {key: _member_for(engine, family) for key, engine in asked.items()} if family else {}
    given = _given(model, served, local, family)
    found, refused = _engine_files(model, given, asked, served, members, local) if given else ({}, {})
    if given is None:
        _unknown(model, settings)
    if strict and refused:
        why = next(iter(refused.values()))
        raise EdgeError(f"{why}; see `edge models list` or `edge backends` for what each engine can run")
    return ModelFiles(model, given, found, refused, served.key if served is not None else None)


def _family(model: str) -> list[RegistryEntry]:
    """The registry entries a name means: a family's members, or an entry's own family."""
    name = REGISTRY[model].family_name if model in REGISTRY else model
    return [e for e in REGISTRY.values() if e.family_name == name]


def _member_for(engine: Engine, family: list[RegistryEntry]) -> RegistryEntry | None:
    """The family member an engine should run: among those it runs, the first in its preferred formats' order."""
    members = [e for e in family if runs_entry(engine, e)]
    for suffix in engine.formats:
        for entry in members:
            if entry.model_file.path.endswith(suffix):
                return entry
    return members[0] if members else None


def _given(model: str, served: Engine | None, local: Path | None, family: list[RegistryEntry]) -> ModelFile | None:
    """The reference itself: a server's model, a file here, a registry entry (the name's own, or a family's first
    member where no entry has the family's name); None for a name that is none of these."""
    if served is not None:
        parts = model.rstrip("/").split("/")  # `.../yolox_nano/2` -> yolox_nano: what a file's stem is to a file
        return ModelFile(parts[-2] if parts[-1].isdigit() and len(parts) > 1 else parts[-1], model, Path(model))
    if local is not None:
        return ModelFile(local.stem, model, local)
    entry = REGISTRY.get(model) or (family[0] if family else None)
    return ModelFile(entry.name, entry.name, entry=entry) if entry is not None else None


def _unknown(model: str, settings: Settings | None) -> NoReturn:
    """The line for a name that is no file, server reference or registry name: the converted model it may mean
    (`yolox-nano-int9`), else the nearest registry names."""
    if "://" not in model:
        near = difflib.get_close_matches(model, converted_names(settings), n=2, cutoff=0.8)
        if near:
            raise ModelError(
                f"no model named {model!r}: did you mean {' or '.join(near)}, converted here? `edge models list` "
                "shows the names"
            )
        get_entry(model)  # raises the "unknown registry name" line, with the nearest names
    raise EdgeError(f"{model} is no file here, and no engine here serves it (`edge backends` lists the engines)")


def _engine_files(
    model: str,
    given: ModelFile,
    asked: Mapping[str, Engine],
    served: Engine | None,
    members: Mapping[str, RegistryEntry | None],
    local: Path | None,
) -> tuple[dict[str, ModelFile], dict[str, str]]:
    """Each engine's own file of the model, or why it has none: a server's model runs on that server's engine
    only, and such an engine runs nothing else; a family's member in the engine's format; a file it reads."""
    found: dict[str, ModelFile] = {}
    refused: dict[str, str] = {}
    for key, engine in asked.items():
        member = members.get(key)
        if served is not None and served.key == key:
            found[key] = given
        elif served is not None:
            refused[key] = f"{model} is a model on a server: backend {served.key} (or auto) runs it, not {key}"
        elif engine.serves is not None:
            refused[key] = f"{key} runs models on a server, not {model}: give --model {SERVED_EXAMPLE}"
        elif member is not None:
            found[key] = ModelFile(member.name, member.name, entry=member)
        elif members:
            refused[key] = f"the registry has no {model} file that {key} can run"
        elif local is not None and engine.reads(local.name):
            found[key] = given
        else:
            refused[key] = f"{key} reads {', '.join(engine.formats)} files, not {local.name if local else model}"
    return found, refused


SERVED_EXAMPLE = "triton://HOST:PORT/NAME (`edge models export-triton MODEL DIR` writes the server's model repository)"


def every_engine(model: str, settings: Settings | None = None) -> ModelFiles:
    """`model` for every engine installed here: what auto chooses among (`auto/candidates.py`; the benchmarks)."""
    return resolve_model(model, list(engines()), settings)


def _local_file(model: str, settings: Settings | None) -> Path | None:
    """A model file here: one `edge models convert` made (by its name), or an existing file, checked; None for a
    registry name or a server's reference; an error for a file that is not there or that no engine here runs."""
    if "://" in model or model in REGISTRY:
        return None
    converted = converted_model(model, settings)
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
    return None


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


def _foreign(name: str) -> tuple[str, str] | None:
    """What a file of another framework is, and what to give instead; None for any other name."""
    for suffixes, (what, instead) in FOREIGN_FILES.items():
        if name.lower().endswith(suffixes):
            return what, instead.replace("FILE", name)
    return None


def model_for_engine(model: str, backend: str, settings: Settings | None = None) -> tuple[str | None, str | None]:
    """(what `backend` should load for `model`, None), or (None, why it cannot run it): a registry name or family
    picks the family member in the engine's own format; a file must be one it reads."""
    try:
        files = resolve_model(model, [backend], settings)
    except (EdgeError, ModelError) as exc:
        return None, str(exc)
    file = files.engines.get(backend)
    return (file.reference, None) if file is not None else (None, files.refused[backend])


def runs_entry(engine: Engine, entry: RegistryEntry) -> bool:
    """The engine reads the entry's file format, and the registry knows of no reason it cannot run it."""
    allowed = entry.only_engines is None or engine.key in entry.only_engines
    return allowed and engine.reads(entry.model_file.path)


def locate_model(model: str, settings: Settings, progress: Progress | None = None) -> tuple[str, Path]:
    """A registry name (pulled into the cache when missing) or a path to a model file -> (name, path): for the
    tools that take a model as it is given (`edge models`, conversion)."""
    file = resolve_model(model, [], settings).given
    return file.name, local_file(file, settings.model_cache, settings.model_mirror, progress)
