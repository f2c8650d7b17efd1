"""Keeping events whatever the disk does: a damaged database, a folder that cannot be written, a disk filling up.

Detection is the job and events are a service on top of it, so none of these stops the cameras:
- a damaged `events.db` is moved aside (kept, its new name logged and shown in the stats) and a fresh one opened;
- a data folder that cannot be written leaves events live only (SSE, MQTT), reported as a problem, unless
  `storage.required: true` asks to refuse to start;
- writes that fail (a full disk) are counted as lost and reported while they fail: one log line when they start
  failing and one when they work again, never a traceback per event;
- free space is checked every DISK_CHECK_S; below `storage.min_free_mb` the oldest snapshots make room, and while
  it stays low, new snapshots are not written (the rows, a few hundred bytes each, still are).
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from edge_inference.edge.config import ConfigError, StorageConfig
from edge_inference.edge.events.store import LOCK_FILE, DamagedDatabase, EventStore, FolderInUse, move_aside

log = logging.getLogger("edge.events")
DISK_CHECK_S = 10.0
MB = 1024 * 1024
Level = Literal["ok", "warning", "problem"]  # a finding of `edge serve --check`
WRITABLE_FIX = "make the folder writable or set storage.data_dir / EDGE_DATA_DIR"


@dataclass(frozen=True)
class OpenedStore:
    store: EventStore | None
    problem: str | None  # why events are not stored (None: they are)
    notice: str | None  # what was done to open it (a damaged database moved aside)


def open_store(folder: Path, config: StorageConfig) -> OpenedStore:
    try:
        return OpenedStore(EventStore(folder, config), None, None)
    except FolderInUse as exc:
        return _in_use(folder, exc, config)
    except DamagedDatabase as exc:
        kept = move_aside(folder / EventStore.DATABASE)
        notice = f"the events database was damaged ({exc}): moved to {kept}; a fresh one is in use"
        log.warning("%s", notice)
    except OSError as exc:
        return _unwritable(folder, exc, config)
    try:
        return OpenedStore(EventStore(folder, config), None, notice)
    except (OSError, DamagedDatabase) as exc:
        return _unwritable(folder, exc, config)


def folder_holder(folder: Path) -> str | None:
    """Who holds the data folder now (the lock file's words), read from the kernel's lock table without taking the
    lock: taking it even for a moment could leave a service starting then with no events stored."""
    lock = folder / LOCK_FILE
    try:
        held = lock.stat().st_ino in _flocked_inodes(Path("/proc/locks").read_text())
        return (lock.read_text("utf-8", "replace").strip() or "another process") if held else None
    except OSError:
        return None


def _flocked_inodes(table: str) -> set[int]:
    """Inodes under a granted flock: `1: FLOCK  ADVISORY  WRITE 29923 fe:00:2146601 0 EOF` (waiters, `->`, left
    out)."""
    inodes = set()
    for line in table.splitlines():
        fields = line.split()
        inode = fields[5].rpartition(":")[2] if len(fields) >= 6 and fields[1] == "FLOCK" else ""
        if inode.isdigit():
            inodes.add(int(inode))
    return inodes


def storage_outlook(folder: Path, config: StorageConfig) -> tuple[Level, str]:
    """What the service would find for events kept in `folder`, looked at without writing: ok, a warning (it would
    start, keeping no events), or a problem (it would not start)."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent  # the service makes the folders missing under it
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        problem = f"events cannot be stored in {folder}: " + (
            "it cannot be written"
            if existing == folder
            else f"{existing} (the nearest of its folders that exists) cannot be written"
        )
        home = Path.home()
        if not home.exists() and folder.is_relative_to(home):  # a service user made without one: `/nonexistent`
            problem += f"; this user's home, {home}, does not exist"
        fix = WRITABLE_FIX
        if config.required:
            return "problem", f"{problem}: {fix} (storage.required is true: the service would not start)"
        return "warning", f"{problem}: {fix}; detection would go on, events reaching live listeners and MQTT only"
    holder = folder_holder(folder)
    if holder is None:
        return "ok", f"events are kept in {folder}"
    return "warning", (
        f"events are kept in {folder}, which {holder} holds now: fine if that is the service this check is for; "
        "a second service beside it would store no events (give it a storage.data_dir of its own)"
    )


def _in_use(folder: Path, exc: FolderInUse, config: StorageConfig) -> OpenedStore:
    problem = f"events are not stored: the data folder {folder} is in use by {exc}"
    fix = "give this one a folder of its own (storage.data_dir or EDGE_DATA_DIR), or stop the other"
    return _not_stored(problem, fix, config)


def _unwritable(folder: Path, exc: Exception, config: StorageConfig) -> OpenedStore:
    problem = f"events are not stored: cannot write to {folder} ({exc.__cause__ or exc})"
    return _not_stored(problem, WRITABLE_FIX, config)


def _not_stored(problem: str, fix: str, config: StorageConfig) -> OpenedStore:
    if config.required:
        raise ConfigError(f"{problem}: {fix} (storage.required is true)")
    log.error("%s: %s; detection goes on, events reach live listeners and MQTT only", problem, fix)
    return OpenedStore(None, f"{problem}: {fix}", None)


class StorageWatch:
    """Whether events are being stored now, and why not: read by health and the stats, written by the recorder."""

    def __init__(self, store: EventStore | None, config: StorageConfig, problem: str | None = None) -> None:
        self.store = store
        self.config = config
        self.fixed_problem = problem  # no store at all: stays until a restart
        self.write_problem: str | None = None
        self.disk_problem: str | None = None
        self.failed_writes = 0  # written by the writer's thread alone
        self.stalled_since: float | None = None  # a write the disk has not finished since then (monotonic)
        self._next_disk_check = 0.0
        self._said = Flapping()  # failing / working again, said at most once a minute

    @property
    def problem(self) -> str | None:
        return self.fixed_problem or self.stall_problem or self.write_problem or self.disk_problem

    @property
    def stall_problem(self) -> str | None:
        since = self.stalled_since
        if since is None:
            return None
        folder = self.store.folder if self.store is not None else "the data folder"
        return (
            f"storage: a write has been waiting {time.monotonic() - since:.0f} s in {folder} (a stalled or frozen "
            "disk): event changes still reach live listeners and MQTT, and are stored once the disk answers"
        )

    def stalled(self, since: float) -> None:
        """The recorder could wait no longer for the writer (its thread): said once per stall."""
        if self.stalled_since is None:
            self.stalled_since = since
            log.warning("%s", self.stall_problem)

    def answered(self, waiting: int) -> None:
        """The writer's thread finished a write: a stall, if there was one, is over."""
        since, self.stalled_since = self.stalled_since, None
        if since is not None:
            log.warning(
                "storage answers again after a %.0f s stall; %d changes told live meanwhile are being stored",
                time.monotonic() - since,
                waiting,
            )

    @property
    def snapshots_allowed(self) -> bool:
        return self.disk_problem is None

    def failed(self, what: str, exc: Exception) -> None:
        """A write failed: said when writes start failing (at most once a minute), counted every time."""
        self.failed_writes += 1
        first = self.write_problem is None
        self.write_problem = f"events are not being stored: {what} failed ({_reason(exc)})"
        if first and (flips := self._said.changed(failing=True)) is not None:
            log.error(
                "%s; they still reach live listeners and MQTT, and are counted as lost%s",
                self.write_problem,
                flips,
            )

    def succeeded(self) -> None:
        if self.write_problem is None:
            return
        self.write_problem = None
        if (flips := self._said.changed(failing=False)) is not None:
            log.warning("storing events works again (%d writes failed since start)%s", self.failed_writes, flips)

    def check_disk(self, now: float | None = None) -> None:
        """Every DISK_CHECK_S: room made from the oldest snapshots when free space is below storage.min_free_mb."""
        now = time.monotonic() if now is None else now
        if self.store is None or now < self._next_disk_check or self.config.min_free_mb <= 0:
            return
        self._next_disk_check = now + DISK_CHECK_S
        minimum = int(self.config.min_free_mb * MB)
        free = _free_bytes(self.store.folder)
        if free < minimum:
            freed = self.store.free_snapshots(minimum - free)
            if freed:
                log.warning("data folder nearly full: removed %.1f MB of the oldest snapshots", freed / MB)
            free = _free_bytes(self.store.folder)
        problem = None
        if free < minimum:
            problem = (
                f"the data folder {self.store.folder} has {free / MB:.0f} MB free, under storage.min_free_mb "
                f"({self.config.min_free_mb:g}): snapshots are paused; free some space"
            )
        if (problem is None) != (self.disk_problem is None):  # said when it starts and ends, not at every MB
            log.warning("%s", problem or "the data folder has room again: snapshots resume")
        self.disk_problem = problem


class Flapping:
    """A state that flips between failing and working (a disk full to the last few KB: a row fits, the next does
    not) is said at most once a minute, a failure and its recovery: 13 alternating lines in 80 s said nothing the
    first two had not. The flips left unsaid are counted in the next line said."""

    EVERY_S = 60.0

    def __init__(self) -> None:
        self._failing_said_at: float | None = None
        self._recovery_due = False  # the last failure was said: its recovery is said too
        self._unsaid = 0

    def changed(self, failing: bool, now: float | None = None) -> str | None:
        """A flip: the words to add to its line when it is said, None when it is left unsaid."""
        now = time.monotonic() if now is None else now
        if failing:
            due = self._failing_said_at is None or now - self._failing_said_at >= self.EVERY_S
            if due:
                self._failing_said_at = now
            self._recovery_due = due
        else:
            due, self._recovery_due = self._recovery_due, False
        if not due:
            self._unsaid += 1
            return None
        unsaid, self._unsaid = self._unsaid, 0
        return f" ({unsaid} flips between failing and working since the last line, left unsaid)" if unsaid else ""


def _free_bytes(folder: Path) -> int:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 0


def _reason(exc: Exception) -> str:
    if isinstance(exc, sqlite3.Error) and "full" in str(exc):
        return "the disk is full"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
