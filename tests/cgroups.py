"""A memory cgroup of its own for a process under test (v1 or v2, root only): the kernel's OOM killer then acts
inside it, never on the machine."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

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


@contextlib.contextmanager
def memory_limited(limit: int) -> Iterator[Callable[[int], None]]:
    """A new memory cgroup of `limit` bytes; yields a function that moves a process (and its later children) into
    it. Processes left in it are killed at the end. Skips where cgroups cannot be made here (not root, no memory
    controller delegated)."""
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

    def add(pid: int) -> None:
        (folder / "cgroup.procs").write_text(str(pid))

    try:
        yield add
    finally:
        for pid in (folder / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        for _ in range(100):
            with contextlib.suppress(OSError):
                folder.rmdir()
                break
            time.sleep(0.05)  # the killed processes leave the cgroup as they are reaped
