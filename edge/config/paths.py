"""A config file's relative paths, read from the file's own folder, as Docker Compose and Prometheus read theirs:
the same file then works from a shell, a systemd unit (WorkingDirectory=/var/lib/edge) and a container alike. A
path that is only in the folder edge was started in is still read there, as before."""

from __future__ import annotations

import difflib
import glob
import os
import re
from pathlib import Path

from edge_inference.edge.errors import EdgeError
from edge_inference.models.registry import is_registry_name


def anchored_source(source: str, folder: Path) -> str:
    """A file, folder or glob source from `folder`; a camera or a URL as it is."""
    return _anchored(source, folder) if _is_local_path(source) else source


def anchored_model(model: str, folder: Path) -> str:
    """A model file from `folder`; a registry name as it is."""
    return _anchored(model, folder) if _is_model_path(model, folder) else model


# A stream address typed with a slip (`rtsp:/cam`, `rtsp//cam`, `rstp://cam`) or without its scheme (`cam:554/live`):
# kept as written, for the source to answer with the address meant, not read as a file in the config's folder.
TYPED_SCHEME = re.compile(r"([A-Za-z]+)(?::/{0,2}|//)(?=[^/])")
HOST_AND_PORT = re.compile(r"[\w.-]+:\d{2,5}(/|$)")


def _is_local_path(source: str) -> bool:
    """A file, folder or glob: not a camera index, a device (absolute anyway) or a URL, nor one typed with a slip."""
    source = source.strip()
    address = "://" in source or TYPED_SCHEME.match(source) or HOST_AND_PORT.match(source)
    return bool(source) and not source.isdigit() and not (address and not Path(source).exists())


def _is_model_path(model: str, folder: Path) -> bool:
    """A model file rather than a registry name (a mistyped name keeps its "did you mean" answer)."""
    if is_registry_name(model) or "://" in model:  # a model on a server (`triton://host:8000/name`)
        return False
    return "/" in model or bool(Path(model).suffix) or (folder / model).exists()


def anchored_path(value: Path | None, folder: Path) -> Path | None:
    return None if value is None else Path(_anchored(str(value), folder))


def _anchored(value: str, folder: Path) -> str:
    """`value` from the config's folder when it is relative; from the working folder only where nothing is in the
    config's folder but something is there. Neither: the config's folder, so an error names the full path.
    `~/clips` is the home folder's, as a shell reads it: nothing after this expands it (FFmpeg did not, and the
    data folder's mkdir made a folder named `~`)."""
    expanded = os.path.expanduser(value.strip())
    if os.path.isabs(expanded):
        return expanded
    in_folder = str(folder / expanded)
    if _exists(in_folder) or not _exists(expanded):
        return in_folder
    return expanded


def _exists(path: str) -> bool:
    if any(ch in path for ch in "*?["):
        return bool(glob.glob(path))
    return os.path.exists(path)


def with_path_meant(message: str, value: str | os.PathLike[str]) -> str:
    """`message` about a path that does not exist, with the path most likely meant when one is near."""
    hint = path_meant(value)
    return f"{message}; {hint}" if hint else message


def path_meant(value: str | os.PathLike[str]) -> str:
    """Why a path that does not exist does not, in a clause to add to its message: the file in its folder spelled
    nearest (`vtst.avi`, `yolox-nano.onnx`, `Cat.JPG`), the same file one folder down (`models/yolox_nano.onnx`
    for `models/onnx/yolox_nano.onnx`), or the first folder on the way that is not there, with the one nearest to
    it. Empty when nothing near is found (or the folder cannot be listed)."""
    path = Path(os.path.expanduser(os.fspath(value)))
    missing = path
    while not missing.parent.exists() and missing.parent != missing:
        missing = missing.parent  # the first part of the path that is not there
    near = _nearest_entry(missing)
    if missing != path:
        hint = f"there is no folder {missing}"
        return f"{hint} (did you mean {missing.parent / near}?)" if near else hint
    if near:
        return f"did you mean {path.parent / near}?"
    below = _one_folder_down(path)
    return f"it is one folder down: did you mean {below}?" if below else ""


MAX_FOLDERS_LOOKED_IN = 64  # a folder of many folders (a NAS share of recordings) is not walked for a hint


def _one_folder_down(path: Path) -> Path | None:
    """`path`'s name (but for case, `-`/`_` and spaces) in one of the folders beside it: the folder a model or a clip
    usually sits in (`models/onnx/`, `media/`) left out of the path. Only the same name: a near spelling in whichever
    folder comes first is some other file (`/tmp/o.txt` for `/nope.txt`)."""
    try:
        folders = sorted(entry.path for entry in os.scandir(path.parent or ".") if entry.is_dir())
    except OSError:
        return None
    wanted = _plain_name(path.name)
    for folder in folders[:MAX_FOLDERS_LOOKED_IN]:
        try:
            same = [entry.name for entry in os.scandir(folder) if _plain_name(entry.name) == wanted]
        except OSError:
            continue
        if same:
            return Path(folder) / min(same)
    return None


def _nearest_entry(path: Path) -> str | None:
    """The name in `path`'s folder that `path`'s name most likely means: the same but for case, `-`/`_` and
    spaces, the closest spelling, or the one name that begins with it."""
    try:
        names = [entry.name for entry in os.scandir(path.parent or ".")]
    except OSError:
        return None
    plain = {_plain_name(name): name for name in sorted(names)}
    wanted = _plain_name(path.name)
    if wanted in plain:
        return plain[wanted]
    near = difflib.get_close_matches(wanted, list(plain), n=1, cutoff=0.75)
    if near:
        return plain[near[0]]
    stem, suffix = _plain_name(path.stem), path.suffix.lower()
    longer = [name for key, name in plain.items() if key.startswith(stem) and key.endswith(suffix)]
    return longer[0] if stem and len(longer) == 1 else None  # `cat.jpg` for the one `cat_720p.jpg`


def _plain_name(name: str) -> str:
    return name.lower().replace("-", "_").replace(" ", "_")


def check_label_file(labels: str | None) -> None:
    """A label file (`--labels`, `labels:`, a sidecar's) that is not there, said with the file most likely meant,
    before an engine is loaded for nothing."""
    if labels is None:
        return
    path = Path(labels).expanduser()
    if not path.is_file():
        what = "is a folder, not a label file" if path.is_dir() else "does not exist"
        raise EdgeError(with_path_meant(f"label file {labels} {what}", path))
