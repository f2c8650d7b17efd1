"""A config file's relative paths, read from the file's own folder, as Docker Compose and Prometheus read theirs:
the same file then works from a shell, a systemd unit (WorkingDirectory=/var/lib/edge) and a container alike. A
path that is only in the folder edge was started in is still read there, as before."""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

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
    if is_registry_name(model):
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
