"""A folder that a tool's work ends in writing to, checked before the work starts: minutes of measuring or
calibrating were lost to a folder that could not hold the result."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path


def ensure_writable(folder: Path) -> None:
    """`folder` made, with its parents, and written to once: raises OSError (its `strerror` says why) where this
    user cannot (another user's folder, a read-only disk, a file in the way). A file written, not `os.access`: it
    also sees ACLs, mounts and quotas the mode bits do not show."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=folder):
        pass


# What a conversion writes while it works, named with its process id: its partial files (`.NAME.PID.partial.onnx`)
# and the toolchain's work folder (`.edge-work-PID-...`)
LEFTOVER = re.compile(r"^\..+\.(\d+)\.partial|^\.edge-work-(\d+)-")


def work_prefix() -> str:
    """The name a work folder of this process starts with, so that a later run knows it for a leftover."""
    return f".edge-work-{os.getpid()}-"


def drop_leftovers(folder: Path) -> list[Path]:
    """What a conversion killed mid-way (SIGKILL, the OOM killer, a power cut) left in `folder`, removed once the
    process that wrote it is gone; a running one's is left alone. The paths removed."""
    removed = []
    for path in folder.iterdir() if folder.is_dir() else ():
        match = LEFTOVER.match(path.name)
        if match is None or _alive(int(match.group(1) or match.group(2))):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process; a pid past the kernel's range is no process, but keep it: not ours
    return True
