"""Small file systems for the disk's failures: a tmpfs that fills up, one mounted read-only.

Mounting needs root (or CAP_SYS_ADMIN); where it is not allowed the test is skipped and says why. Each mount is
undone by the test that made it, lazily, so a process still holding a file in it cannot keep it mounted.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs_mounted(path: Path, size_kb: int, read_only: bool = False) -> Iterator[str | None]:
    """Yields None once mounted, or why it could not be."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size_kb}k,mode=0755" + (",ro" if read_only else "")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        yield f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}"
        return
    try:
        yield None
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@contextlib.contextmanager
def tmpfs(path: Path, size_kb: int, read_only: bool = False) -> Iterator[Path]:
    with tmpfs_mounted(path, size_kb, read_only) as failed:
        if failed:
            pytest.skip(failed)
        yield path


def fill(folder: Path, name: str = "filler") -> Path:
    """A file that takes every free byte of the file system under `folder`; delete it to give the room back."""
    filler = folder / name
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for size in (1 << 16, 1 << 10, 1):  # big blocks, then the last few bytes
            try:
                while True:
                    os.write(descriptor, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(descriptor)
    return filler


def leave_free(folder: Path, free_bytes: int, name: str = "filler") -> Path:
    """A file that leaves about `free_bytes` free on the file system under `folder`."""
    filler = folder / name
    size = shutil.disk_usage(folder).free - free_bytes
    assert size > 0
    filler.write_bytes(b"\0" * size)
    return filler


class Freezable:
    """An ext4 file system on a loop device, frozen and thawed as `fsfreeze` does (a disk that stops answering: a
    dying SD card, a NAS gone away, a snapshot tool): every write to it waits until the thaw."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.frozen = False

    def freeze(self) -> None:
        subprocess.run(["fsfreeze", "--freeze", str(self.path)], check=True)
        self.frozen = True

    def thaw(self) -> None:
        if self.frozen:
            subprocess.run(["fsfreeze", "--unfreeze", str(self.path)], check=True)
            self.frozen = False


@contextlib.contextmanager
def freezable(path: Path, size_mb: int = 64) -> Iterator[Freezable]:
    """Skips with the reason where a loop device cannot be mounted or frozen here (not root, no mkfs.ext4)."""
    if shutil.which("mkfs.ext4") is None or shutil.which("fsfreeze") is None:
        pytest.skip("mkfs.ext4 and fsfreeze are needed (Debian's e2fsprogs and util-linux)")
    image = path.with_name(path.name + ".img")
    with open(image, "wb") as file:
        file.truncate(size_mb * 1024 * 1024)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True)
    path.mkdir(parents=True, exist_ok=True)
    mounted = made.returncode == 0 and (
        subprocess.run(["mount", "-o", "loop", str(image), str(path)], capture_output=True).returncode == 0
    )
    if not mounted:
        image.unlink(missing_ok=True)
        pytest.skip("cannot mount a loop device here (needs root and loop devices)")
    disk = Freezable(path)
    try:
        yield disk
    finally:
        disk.thaw()  # never leave it frozen: whatever waits on it would wait for good
        subprocess.run(["umount", "-l", str(path)], check=False)
        image.unlink(missing_ok=True)
