"""Events, their snapshots and the outbox of messages still to deliver, in SQLite (WAL) under the data folder.

An event change and the messages that announce it are written in one transaction, so after a crash (SIGKILL,
OOM killer) either both are there or neither: nothing the API has shown is lost, and everything stored is still
delivered. `synchronous=NORMAL` in WAL mode survives a killed process; only a power cut can lose the last commits.
Snapshots are JPEG files beside the database (written before the row that names them), capped in total size.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from edge_inference.edge.config import StorageConfig
from edge_inference.edge.events.builder import Event
from edge_inference.models.labels import label_key

log = logging.getLogger("edge.events")

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id TEXT PRIMARY KEY, stream TEXT NOT NULL, label TEXT NOT NULL, track_id INTEGER NOT NULL,
    start REAL NOT NULL, "end" REAL, best_score REAL NOT NULL, zones TEXT NOT NULL, lines TEXT NOT NULL,
    frames INTEGER NOT NULL, snapshot TEXT, snapshot_bytes INTEGER NOT NULL DEFAULT 0, updated REAL NOT NULL,
    first_recorded REAL
);
CREATE INDEX IF NOT EXISTS events_start ON events (start);
CREATE INDEX IF NOT EXISTS events_stream_start ON events (stream, start);
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, sink TEXT NOT NULL, topic TEXT NOT NULL, payload BLOB NOT NULL,
    retain INTEGER NOT NULL, created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS outbox_sink ON outbox (sink, seq);
CREATE TABLE IF NOT EXISTS outbox_dropped (sink TEXT PRIMARY KEY, count INTEGER NOT NULL);
"""
# Each stored change's position: the time it was recorded, made strictly increasing in this folder. An event's row
# keeps the position of its last change (`updated`) and of its start (`first_recorded`), so a client that was away
# (an SSE reconnect's Last-Event-ID) is told what changed since, across restarts. A database from before has no
# `first_recorded`: it is added, and its old rows count their start as their frame's time.
COLUMNS = (
    'id, stream, label, track_id, start, "end", best_score, zones, lines, frames, snapshot, snapshot_bytes,'
    " updated, COALESCE(first_recorded, start)"
)


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "edge-inference"


Outgoing = tuple[str, str, bytes, bool]  # sink, topic, payload, retain


@dataclass(frozen=True)
class Message:
    """One message for one destination (`sink`: "mqtt" or "webhook:<n>"), in the order it was queued."""

    seq: int
    sink: str
    topic: str
    payload: bytes
    retain: bool


@dataclass(frozen=True)
class StoredEvent:
    event: Event
    has_snapshot: bool

    def to_dict(self) -> dict[str, object]:
        return self.event.to_dict() | {"has_snapshot": self.has_snapshot}


@dataclass(frozen=True)
class EventQuery:
    stream: str | None = None
    label: str | None = None
    zone: str | None = None
    after: float | None = None  # start time, seconds since the epoch
    before: float | None = None
    limit: int = 50
    cursor: tuple[float, str] | None = None  # (start, id) of the last event of the previous page


class FolderInUse(Exception):
    """Another process keeps its events in this folder; the text says which."""


LOCK_FILE = "events.lock"


def hold_folder(folder: Path) -> int | None:
    """An exclusive lock on the data folder while this process keeps events in it: a second edge on the same folder
    (a test run beside the systemd service, two containers on one volume) would end the first one's open events as
    "left by a previous run" and send its outbox a second time. The kernel drops the lock when the process ends,
    however it ends, so none is ever left stale. None where the file system has no locks (some network mounts)."""
    held = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(held, 200, 0).decode("utf-8", "replace").strip() or "another process"
        os.close(held)
        raise FolderInUse(holder) from None
    except OSError:
        os.close(held)
        return None
    os.ftruncate(held, 0)
    os.pwrite(held, f"edge (process {os.getpid()} on {socket.gethostname()})\n".encode(), 0)
    return held


class DamagedDatabase(Exception):
    """events.db exists but SQLite finds it damaged (a corrupt page, not a database at all)."""


class StoreBusy(Exception):
    """A read waited READ_WAIT_S for a write that holds the store (a stalled disk): answer without the store."""


READ_WAIT_S = 2.0  # what a read waits for a write in progress before it gives up (a frozen disk holds one for minutes)


def move_aside(database: Path) -> Path:
    """The damaged file and its WAL and shared memory, renamed with the time: kept for whoever wants to look."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    kept = database.with_name(f"{database.name}.damaged-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        part = Path(f"{database}{suffix}")
        if part.exists():
            part.replace(Path(f"{kept}{suffix}"))
    return kept


class StoreDamaged(StoreBusy):
    """The database was found damaged while serving: moved aside and a fresh one opened; this call got nothing."""


def _damaged(exc: sqlite3.Error) -> bool:
    """SQLite's word that the file itself is bad (a corrupt page, not a database), not that it is busy or full."""
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError)


class EventStore:
    DATABASE = "events.db"

    def __init__(self, folder: Path, config: StorageConfig) -> None:
        self.folder = folder
        self.config = config
        self.snapshots = folder / "snapshots"
        self.path = folder / self.DATABASE
        self._held: int | None = None
        try:
            self.snapshots.mkdir(parents=True, exist_ok=True)
            self._held = hold_folder(folder)
            self._connect()
        except (OSError, sqlite3.Error) as exc:
            self._let_go()
            raise OSError(f"cannot keep events in {folder}: {exc}") from exc
        try:
            self._prepare()
        except sqlite3.OperationalError as exc:  # cannot write: read-only, no permission, locked
            self._db.close()
            self._let_go()
            raise OSError(f"cannot keep events in {folder}: {exc}") from exc
        except (sqlite3.DatabaseError, DamagedDatabase) as exc:
            self._db.close()
            self._let_go()
            raise DamagedDatabase(str(exc)) from exc
        self._lock = threading.Lock()  # one connection, shared by the recorder, the senders and the API
        self.sinks: set[str] = set()  # destinations with a sender: counted even while nothing waits for them
        self.notice: str | None = None  # the last time a database found damaged while serving was replaced
        for part in self.snapshots.glob(".*.part"):  # snapshots a full disk or a crash cut short
            part.unlink(missing_ok=True)

    def _connect(self) -> None:
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        # a label filter matches as the config's labels do: "Person", "traffic_light" (as topics write it)
        self._db.create_function("label_key", 1, label_key, deterministic=True)

    def _replace_damaged(self, exc: sqlite3.Error) -> None:
        """As at start, while serving: the damaged file moved aside, a fresh one opened, said. The lock held."""
        with contextlib.suppress(sqlite3.Error):
            self._db.close()
        kept = move_aside(self.path)
        self._connect()
        self._prepare()
        self.notice = (
            f"the events database was found damaged while serving ({exc}): moved to {kept}; a fresh one is in use"
        )
        log.warning("%s", self.notice)

    def _prepare(self) -> None:
        """WAL, the schema, and a quick check of every page: a damaged file is found now, not at a later write."""
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        problems = [row[0] for row in self._db.execute("PRAGMA quick_check(3)").fetchall()]
        if problems != ["ok"]:
            report = " ".join(" ".join(str(p).split()) for p in problems)  # SQLite's report, on one line
            raise DamagedDatabase(report.replace("*** in database main *** ", "")[:300])
        self._db.executescript(SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(events)")}
        if "first_recorded" not in columns:
            self._db.execute("ALTER TABLE events ADD COLUMN first_recorded REAL")
        self._db.execute("CREATE INDEX IF NOT EXISTS events_updated ON events (updated)")
        (newest,) = self._db.execute("SELECT MAX(updated) FROM events").fetchone()
        self._position = float(newest) if newest is not None else 0.0

    def close(self) -> None:
        with self._lock:
            self._db.close()
            self._let_go()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """The store for a read, waited for READ_WAIT_S at most: the API answers 503 at once rather than hang behind
        a write the disk holds."""
        if not self._lock.acquire(timeout=READ_WAIT_S):
            raise StoreBusy(
                f"the events database in {self.folder} is held by a write the disk has not finished for over "
                f"{READ_WAIT_S:g} s (a stalled or frozen disk): try again later"
            )
        try:
            yield
        except sqlite3.DatabaseError as exc:
            if not _damaged(exc):
                raise
            self._replace_damaged(exc)
            raise StoreDamaged(f"{self.notice}: try again") from None
        finally:
            self._lock.release()

    def _let_go(self) -> None:
        if self._held is not None:
            os.close(self._held)  # the lock goes with the descriptor
            self._held = None

    # -- writing ---------------------------------------------------------------------------------------------
    def write_snapshot(self, event_id: str, jpeg: bytes) -> str:
        """Written (and flushed) before the row that names it; a crash leaves at worst an unnamed file."""
        name = f"{event_id}.jpg"
        temporary = self.snapshots / f".{name}.part"
        try:
            with open(temporary, "wb") as file:
                file.write(jpeg)
                file.flush()
                os.fsync(file.fileno())
            temporary.replace(self.snapshots / name)
        except OSError:
            temporary.unlink(missing_ok=True)  # a full disk left 38 empty .part files that nothing removed
            raise
        return name

    def record(self, event: Event, snapshot: tuple[str, int] | None, messages: list[Outgoing]) -> float:
        """The event's row and the messages announcing it (sink, topic, payload, retain), in one transaction.
        Returns the change's position (COLUMNS)."""
        with self._lock:
            # after the newest one, even if the wall clock went back (a Pi's NTP correction)
            now = max(time.time(), math.nextafter(self._position, math.inf))
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    'INSERT INTO events (id, stream, label, track_id, start, "end", best_score, zones, lines, frames,'
                    " snapshot, snapshot_bytes, updated, first_recorded) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
                    ' ON CONFLICT(id) DO UPDATE SET "end"=excluded."end", best_score=excluded.best_score,'
                    " zones=excluded.zones, lines=excluded.lines, frames=excluded.frames, updated=excluded.updated,"
                    " snapshot=COALESCE(excluded.snapshot, snapshot),"
                    " snapshot_bytes=CASE WHEN excluded.snapshot IS NULL THEN snapshot_bytes"
                    " ELSE excluded.snapshot_bytes END",
                    _row(event, snapshot, now),  # first_recorded: kept from the start's insert
                )
                self._db.executemany(
                    "INSERT INTO outbox (sink, topic, payload, retain, created) VALUES (?,?,?,?,?)",
                    [(sink, topic, payload, int(retain), now) for sink, topic, payload, retain in messages],
                )
                self._db.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                if _damaged(exc):
                    self._replace_damaged(exc)
                    raise StoreDamaged(f"{self.notice}: this change was not stored") from None
                if self._db.in_transaction:  # SQLite has already rolled back after some errors (a full disk)
                    self._db.execute("ROLLBACK")
                raise
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            self._position = now
        self._bound_outbox({sink for sink, *_ in messages})
        return now

    def _bound_outbox(self, sinks: set[str]) -> None:
        """Past max_outbox undelivered messages for a destination, the oldest go, counted and logged."""
        limit = self.config.max_outbox
        for sink in sinks:
            with self._lock:
                (count,) = self._db.execute("SELECT COUNT(*) FROM outbox WHERE sink=?", (sink,)).fetchone()
                excess = count - limit
                if excess <= 0:
                    continue
                self._db.execute(
                    "DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox WHERE sink=? ORDER BY seq LIMIT ?)",
                    (sink, excess),
                )
                self._db.execute(
                    "INSERT INTO outbox_dropped (sink, count) VALUES (?, ?)"
                    " ON CONFLICT(sink) DO UPDATE SET count = count + excluded.count",
                    (sink, excess),
                )
            log.warning("outbox for %s is full (%d messages): dropped the %d oldest", sink, limit, excess)

    # -- the outbox ------------------------------------------------------------------------------------------
    def pending(self, sink: str, limit: int = 50) -> list[Message]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, sink, topic, payload, retain FROM outbox WHERE sink=? ORDER BY seq LIMIT ?", (sink, limit)
            ).fetchall()
        return [Message(seq, s, topic, bytes(payload), bool(retain)) for seq, s, topic, payload, retain in rows]

    def delivered(self, messages: list[Message]) -> None:
        with self._lock:
            self._db.executemany("DELETE FROM outbox WHERE seq=?", [(m.seq,) for m in messages])

    def outbox_counts(self) -> dict[str, dict[str, int]]:
        """Per destination: messages waiting, and messages dropped because the outbox was full."""
        with self._reading():
            waiting = dict(self._db.execute("SELECT sink, COUNT(*) FROM outbox GROUP BY sink").fetchall())
            dropped = dict(self._db.execute("SELECT sink, count FROM outbox_dropped").fetchall())
        sinks = sorted({*self.sinks, *waiting, *dropped})
        return {s: {"waiting": waiting.get(s, 0), "dropped": dropped.get(s, 0)} for s in sinks}

    # -- reading ---------------------------------------------------------------------------------------------
    def query(self, query: EventQuery) -> list[StoredEvent]:
        """Newest first; pass the last event's (start, id) as the cursor for the next page."""
        where: list[str] = ["1=1"]
        params: list[object] = []
        if query.stream is not None:
            where.append("stream = ?")
            params.append(query.stream)
        if query.label is not None:
            where.append("label_key(label) = ?")
            params.append(label_key(query.label))
        if query.zone is not None:
            where.append("EXISTS (SELECT 1 FROM json_each(events.zones) WHERE value = ?)")
            params.append(query.zone)
        if query.after is not None:
            where.append("start >= ?")
            params.append(query.after)
        if query.before is not None:
            where.append("start < ?")
            params.append(query.before)
        if query.cursor is not None:
            where.append("(start < ? OR (start = ? AND id < ?))")
            params.extend([query.cursor[0], query.cursor[0], query.cursor[1]])
        # only the fixed clauses above are joined; every value is a parameter
        sql = f"SELECT {COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY start DESC, id DESC LIMIT ?"  # noqa: S608
        with self._reading():
            rows = self._db.execute(sql, [*params, query.limit]).fetchall()
        return [_stored(row) for row in rows]

    def get(self, event_id: str) -> StoredEvent | None:
        with self._reading():
            row = self._db.execute(f"SELECT {COLUMNS} FROM events WHERE id=?", (event_id,)).fetchone()  # noqa: S608
        return None if row is None else _stored(row)

    def unfinished(self) -> list[tuple[Event, float]]:
        """Events a previous run left open (it was killed), with when each was last updated."""
        with self._lock:
            rows = self._db.execute(f'SELECT {COLUMNS} FROM events WHERE "end" IS NULL ORDER BY start').fetchall()  # noqa: S608
        return [(_stored(row).event, float(row[12])) for row in rows]

    @property
    def position(self) -> float:
        """The newest change's position (0 with none stored). Read without the lock (a float is read whole): the
        event loop asks it, and must never wait for a write."""
        return self._position

    def changed_since(self, position: float, limit: int) -> list[tuple[StoredEvent, float, float]]:
        """Events changed after `position`, oldest change first, with the positions of their start and of their
        last change."""
        with self._reading():
            rows = self._db.execute(
                f"SELECT {COLUMNS} FROM events WHERE updated > ? ORDER BY updated LIMIT ?",  # noqa: S608
                (position, limit),
            ).fetchall()
        return [(_stored(row), float(row[13]), float(row[12])) for row in rows]

    def snapshot_path(self, event_id: str) -> Path | None:
        with self._reading():
            row = self._db.execute("SELECT snapshot FROM events WHERE id=?", (event_id,)).fetchone()
        if row is None or row[0] is None:
            return None
        path = self.snapshots / row[0]
        return path if path.is_file() else None

    # -- retention -------------------------------------------------------------------------------------------
    def prune(self, now: float | None = None) -> int:
        """Events past max_age_days or beyond max_events go with their snapshots; then snapshots past the disk cap
        (oldest first; their events stay). Returns how many events were removed."""
        now = time.time() if now is None else now
        cutoff = now - self.config.max_age_days * 86400
        with self._lock:
            old = self._db.execute(
                "SELECT id, snapshot FROM events WHERE start < ? OR id IN"
                " (SELECT id FROM events ORDER BY start DESC LIMIT -1 OFFSET ?)",
                (cutoff, self.config.max_events),
            ).fetchall()
            self._db.executemany("DELETE FROM events WHERE id=?", [(event_id,) for event_id, _ in old])
            files = [name for _, name in old if name]
            files += self._over_snapshot_cap()
        for name in files:
            (self.snapshots / name).unlink(missing_ok=True)
        return len(old)

    def free_snapshots(self, needed: int) -> int:
        """Make room on a disk running out: the oldest snapshots go (their events stay). Returns the bytes freed."""
        with self._lock:
            chosen = self._oldest_snapshots(needed)
        for _, name, _ in chosen:
            (self.snapshots / name).unlink(missing_ok=True)  # the files first: the update below needs the room
        with self._lock:
            self._forget_snapshots(chosen)
        return sum(size for *_, size in chosen)

    def _over_snapshot_cap(self) -> list[str]:
        """The snapshots to remove for the cap, the lock held: first files no row names (a damaged database's, moved
        aside with their rows: 7.8 MB that stayed forever), oldest first, then the oldest events' snapshots."""
        cap = int(self.config.max_snapshot_mb * 1024 * 1024)
        (total,) = self._db.execute("SELECT COALESCE(SUM(snapshot_bytes), 0) FROM events").fetchone()
        named = {row[0] for row in self._db.execute("SELECT snapshot FROM events WHERE snapshot IS NOT NULL")}
        orphans = sorted(
            (entry.stat().st_mtime, entry.name, entry.stat().st_size)
            for entry in os.scandir(self.snapshots)
            if entry.is_file() and entry.name.endswith(".jpg") and entry.name not in named
        )
        total += sum(size for *_, size in orphans)
        removed: list[str] = []
        for _, name, size in orphans:
            if total <= cap:
                break
            removed.append(name)
            total -= size
        chosen = self._oldest_snapshots(total - cap) if total > cap else []
        self._forget_snapshots(chosen)
        return removed + [name for _, name, _ in chosen]

    def _oldest_snapshots(self, needed: int) -> list[tuple[str, str, int]]:
        """(event id, file, bytes) of the oldest snapshots that together reach `needed` bytes; the lock held."""
        chosen: list[tuple[str, str, int]] = []
        freed = 0
        rows = self._db.execute(
            "SELECT id, snapshot, snapshot_bytes FROM events WHERE snapshot IS NOT NULL ORDER BY start"
        ).fetchall()
        for event_id, name, size in rows:
            if freed >= needed:
                break
            chosen.append((event_id, name, size))
            freed += size
        return chosen

    def _forget_snapshots(self, chosen: list[tuple[str, str, int]]) -> None:
        self._db.executemany(
            "UPDATE events SET snapshot=NULL, snapshot_bytes=0 WHERE id=?", [(event_id,) for event_id, *_ in chosen]
        )


def _row(event: Event, snapshot: tuple[str, int] | None, now: float) -> tuple[object, ...]:
    name, size = snapshot if snapshot else (None, 0)
    zones, lines = json.dumps(event.zones), json.dumps(event.lines)
    return (event.id, event.stream, event.label, event.track_id, event.start, event.end, event.best_score, zones,
            lines, event.frames, name, size, now, now)  # fmt: skip


def _stored(row: tuple[object, ...]) -> StoredEvent:
    (event_id, stream, label, track_id, start, end, best, zones, lines, frames, snapshot, _size, *_positions) = row
    event = Event(
        id=str(event_id),
        stream=str(stream),
        label=str(label),
        track_id=int(track_id),  # type: ignore[call-overload]
        start=float(start),  # type: ignore[arg-type]
        end=None if end is None else float(end),  # type: ignore[arg-type]
        best_score=float(best),  # type: ignore[arg-type]
        zones=tuple(json.loads(str(zones))),
        lines=tuple(json.loads(str(lines))),
        frames=int(frames),  # type: ignore[call-overload]
    )
    return StoredEvent(event, snapshot is not None)
