"""A folder that a tool's work ends in writing to, checked before the work starts: minutes of measuring or
calibrating were lost to a folder that could not hold the result."""

from __future__ import annotations

import tempfile
from pathlib import Path


def ensure_writable(folder: Path) -> None:
    """`folder` made, with its parents, and written to once: raises OSError (its `strerror` says why) where this
    user cannot (another user's folder, a read-only disk, a file in the way). A file written, not `os.access`: it
    also sees ACLs, mounts and quotas the mode bits do not show."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=folder):
        pass
