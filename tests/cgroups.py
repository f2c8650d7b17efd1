"""A memory cgroup of its own for a process under test (v1 or v2, root only): the kernel's OOM killer then acts
inside it, never on the machine."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_inference.backends.isolated import oom_kills_in

ROOT = Path("/sys/fs/cgroup")


def _own_memory_cgroup() -> tuple[Path, str] | None:
    """This process's memory cgroup folder and its version ("v1" or "v2")."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _id, controllers, path = line.split(":", 2)
        if controllers == "" and (ROOT / "cgroup.controllers").exists():
            return ROOT / path.lstrip("/"), "v2"
        if "memory" in controllers.split(","):
            return ROOT / "memory" / path.lstrip("/"), "v1"
    return None


def _limit(folder: Path, version: str, limit: int) -> None:
    if version == "v1":
        (folder / "memory.limit_in_bytes").write_text(str(limit))
        with contextlib.suppress(OSError):  # without swap accounting there is nothing to hold back
            (folder / "memory.memsw.limit_in_bytes").write_text(str(limit))
    else:
        (folder / "memory.max").write_text(str(limit))
        with contextlib.suppress(OSError):
            (folder / "memory.swap.max").write_text("0")


class MemoryCgroup:
    """A memory cgroup made for a test: processes are moved in with `add`; `oom_kills` counts the kernel's kills."""

    def __init__(self, folder: Path, version: str) -> None:
        self.folder, self.version = folder, version

    def add(self, pid: int) -> None:
        (self.folder / "cgroup.procs").write_text(str(pid))

    def oom_kills(self) -> int:
        return oom_kills_in(self.folder / ("memory.oom_control" if self.version == "v1" else "memory.events")) or 0


@contextlib.contextmanager
def memory_limited(limit: int) -> Iterator[MemoryCgroup]:
    """A new memory cgroup of `limit` bytes, into which processes (and their later children) are moved. Processes
    left in it are killed at the end. Skips where cgroups cannot be made here (not root, no memory controller
    delegated)."""
    own = _own_memory_cgroup()
    if own is None or os.geteuid() != 0:
        pytest.skip("a memory cgroup of its own needs root and the memory controller")
    parent, version = own
    folder = parent / f"edge-test-{uuid.uuid4().hex[:8]}"
    try:
        folder.mkdir()
        _limit(folder, version, limit)
    except OSError as exc:
        pytest.skip(f"cannot make a memory cgroup under {parent}: {exc}")
    try:
        yield MemoryCgroup(folder, version)
    finally:
        for pid in (folder / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        for _ in range(100):
            with contextlib.suppress(OSError):
                folder.rmdir()
                break
            time.sleep(0.05)  # the killed processes leave the cgroup as they are reaped
