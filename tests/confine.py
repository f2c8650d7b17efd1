"""A test's file operations held inside its own folder, for code that turns what a user typed into a path.

`--name /` once made `export-triton` call `shutil.rmtree("/")`: a property test of that code, run against a
regression, would delete the machine's files as root. Inside `confined_to(folder)` every write, removal, rename,
link and new folder that this process makes through Python (its audit events, PEP 578) is checked first, and one
outside `folder` raises PermissionError instead of happening. What a C library writes by itself is not seen.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# event -> the positions of its path arguments
CHANGES = {
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.mkdir": (0,),
    "os.rename": (0, 1),
    "os.link": (0, 1),
    "os.symlink": (1,),
    "os.truncate": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.utime": (0,),
    "shutil.rmtree": (0,),
    "shutil.move": (0, 1),
    "shutil.copyfile": (1,),
    "shutil.copytree": (1,),
}

_fences: list[Path] = []
_lock = threading.Lock()
_installed: list[bool] = []


def _outside(path: Any) -> Path | None:
    if isinstance(path, int) or path is None:  # a file descriptor: opened (and checked) before
        return None
    resolved = Path(os.path.abspath(os.fsdecode(path)))
    for fence in _fences:
        if resolved != fence and fence not in resolved.parents:
            return resolved
    return None


def _writes(event: str, args: tuple[Any, ...]) -> list[Any]:
    if event == "open":
        path, mode, flags = args
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & WRITE_FLAGS
        )
        return [path] if writing else []
    return [args[i] for i in CHANGES.get(event, ())]


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _fences or (event != "open" and event not in CHANGES):
        return
    for path in _writes(event, args):
        outside = _outside(path)
        if outside is not None:
            raise PermissionError(f"{event} of {outside}, outside the test's folder {_fences[-1]} (tests/confine.py)")


@contextlib.contextmanager
def confined_to(folder: Path) -> Iterator[None]:
    with _lock:
        if not _installed:  # an audit hook stays for the process's life: one, switched by `_fences`
            sys.addaudithook(_audit)
            _installed.append(True)
        _fences.append(Path(os.path.abspath(folder)))
    try:
        yield
    finally:
        with _lock:
            _fences.pop()
