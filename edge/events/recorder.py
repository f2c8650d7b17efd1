"""The recorder: event changes from every stream become snapshots, rows and outbox messages, and are told live.

The decode threads only hand changes over (a bounded queue; they never wait on the disk). The recorder's thread
renders each change's snapshot JPEG (the frame with the object's box) and hands it to the writer's thread, which
stores the snapshot, then the row with the messages that announce it in one transaction; once stored, the change is
told to whoever listens live (the API's SSE stream, MQTT's retained state) and the outbox sends it on.
The disk is never waited on for long: a write that has not returned within STALL_S (a frozen or failing disk held
SSE and MQTT for two minutes) has its change told live and sent straight to MQTT at once (`unstored`), and while the
writer stays stuck every change is; the writer stores them as the disk allows, without their messages (sent
already), and health says the storage is stalled. A change that cannot be stored (a full disk, no writable folder)
is told live the same way and counted as lost; its event's latest row is written once storing works again, so an
event's end is never left open. `storage.py` says when storing fails, stalls and works again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from edge_inference.edge.events.builder import EventChange, Snapshot
from edge_inference.edge.events.storage import DISK_CHECK_S, StorageWatch
from edge_inference.edge.events.store import EventStore, StoreBusy
from edge_inference.edge.stream.drawing import render_jpeg
from edge_inference.edge.stream.publish import Broadcaster
from edge_inference.models.detection import Detection

log = logging.getLogger("edge.events")
SNAPSHOT_HEIGHT = 720
SNAPSHOT_QUALITY = 85
PRUNE_EVERY_S = 600.0
STALL_S = 2.0  # a write waited on this long before its change is told live without it
UNWRITTEN_KEPT = 10_000  # events whose latest row waits for the disk to take it

# (sink, topic) pairs that every event change is sent to through the outbox
Destinations = Callable[[], list[tuple[str, str]]]


def change_payload(change: EventChange, has_snapshot: bool) -> dict[str, object]:
    return {"type": change.kind, "event": change.event.to_dict() | {"has_snapshot": has_snapshot}}


@dataclass(frozen=True)
class RecordedChange:
    """A change as told live: its payload, and its position in the store (None where it could not be stored)."""

    payload: dict[str, object]
    position: float | None


def snapshot_jpeg(snapshot: Snapshot, label: str) -> bytes:
    box = Detection(-1, label, snapshot.score, snapshot.box)
    return render_jpeg(snapshot.image, [box], height=SNAPSHOT_HEIGHT, quality=SNAPSHOT_QUALITY, boxes=True)


REPLAY_PAGE = 500


def missed_changes(store: EventStore, after: float) -> list[RecordedChange]:
    """What a client that last saw the change at position `after` has missed, each event as it is now: its start
    (where that came after), then its update or end; oldest first. Several updates in between are one."""
    missed: list[RecordedChange] = []
    while rows := store.changed_since(after, REPLAY_PAGE):
        for stored, first, last in rows:
            ended = stored.event.end is not None
            if first > after:
                missed.append(RecordedChange({"type": "start", "event": stored.to_dict() | {"end": None}}, first))
            if last > first or (first <= after) or ended:
                missed.append(RecordedChange({"type": "end" if ended else "update", "event": stored.to_dict()}, last))
        after = rows[-1][2]
    return sorted(missed, key=lambda change: change.position or 0.0)


@dataclass
class _Write:
    """One change on its way to the disk; `told_live` once the recorder could wait no longer and told it without."""

    change: EventChange
    jpeg: bytes | None
    queued_at: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    told_live: bool = False
    payload: dict[str, object] | None = None
    body: bytes = b""
    position: float | None = None


class EventRecorder:
    def __init__(self, store: EventStore | None, destinations: list[tuple[str, str]], watch: StorageWatch) -> None:
        self.store = store
        self.destinations = destinations
        self.watch = watch
        self.changes: Broadcaster[RecordedChange] = Broadcaster()  # live, for the API
        self.listeners: list[Callable[[EventChange, bytes | None], None]] = []  # after each change is stored
        self.on_stored: list[Callable[[], None]] = []  # wake the outbox senders
        self.unstored: list[Callable[[bytes], None]] = []  # a change that could not be stored, sent directly
        self._queue: queue.Queue[EventChange | None] = queue.Queue(maxsize=10_000)
        self._writes: queue.Queue[_Write | None] = queue.Queue(maxsize=10_000)
        self._thread = threading.Thread(target=self._run, name="event-recorder", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name="event-writer", daemon=True)
        self.recorded = 0
        self.lost = 0  # changes not stored: the disk full or too slow, no writable data folder
        self.last_error: str | None = None
        self._has_snapshot: set[str] = set()
        self._unwritten: dict[str, EventChange] = {}  # event id -> its latest change the disk did not take
        self._overflowing = False

    def start(self) -> None:
        self._writer.start()
        self._thread.start()

    def submit(self, changes: list[EventChange]) -> None:
        for change in changes:
            try:
                self._queue.put_nowait(change)
            except queue.Full:
                self.lost += 1
                if not self._overflowing:  # said once until the queue has room again
                    self._overflowing = True
                    log.error("event queue full: the disk cannot keep up; changes are lost (counted in events.lost)")

    def stop(self, timeout: float = 5.0) -> None:
        """Everything submitted so far is recorded first (the disk allowing, within `timeout`)."""
        deadline = time.monotonic() + timeout
        self._queue.put(None)
        self._thread.join(timeout)
        with contextlib.suppress(queue.Full):
            self._writes.put(None, timeout=max(0.0, deadline - time.monotonic()))
        self._writer.join(max(0.0, deadline - time.monotonic()))

    # -- the recorder's thread: render, hand to the writer, tell live ----------------------------------------
    def _run(self) -> None:
        while True:
            change = self._queue.get()
            if change is None:
                return
            self._overflowing = False
            try:
                self._record(change)
            except Exception as exc:  # a bug loses this change, never the recorder
                self.last_error = f"could not record event {change.event.id}: {exc}"
                log.exception("%s", self.last_error)

    def _record(self, change: EventChange) -> None:
        jpeg = snapshot_jpeg(change.snapshot, change.event.label) if change.snapshot is not None else None
        write = _Write(change, jpeg)
        try:
            self._writes.put_nowait(write)
        except queue.Full:  # the writer is thousands of changes behind: this one is told live only
            self.lost += 1
            self._tell_unstored(write)
            return
        # a writer stuck on the disk already: nothing is waited for until it answers again
        if write.done.wait(0.0 if self.watch.stalled_since is not None else STALL_S):
            self._tell(write)
            return
        with write.lock:
            if not write.done.is_set():
                write.told_live = True
        if not write.told_live:
            self._tell(write)
            return
        # not stalled before: every earlier write had returned, so the writer is stuck on this one
        self.watch.stalled(write.queued_at)
        self._tell_unstored(write)

    def _tell(self, write: _Write) -> None:
        """A change the writer finished: told live with its place in the store, or as unstored where it failed."""
        if write.position is None:
            self._tell_unstored(write)
            return
        assert write.payload is not None
        self.changes.publish(RecordedChange(write.payload, write.position))
        for listener in self.listeners:
            listener(write.change, write.jpeg)

    def _tell_unstored(self, write: _Write) -> None:
        """Told live and sent straight to MQTT, without a place in the store."""
        payload = write.payload or change_payload(write.change, write.change.event.id in self._has_snapshot)
        body = write.body or json.dumps(payload).encode()
        for send in self.unstored:
            send(body)
        self.changes.publish(RecordedChange(payload, None))
        for listener in self.listeners:
            listener(write.change, write.jpeg)

    # -- the writer's thread: the disk, at whatever pace it allows -------------------------------------------
    def _write_loop(self) -> None:
        last_prune = 0.0
        while True:
            write: _Write | bool | None
            try:
                write = self._writes.get(timeout=DISK_CHECK_S)
            except queue.Empty:
                write = False  # nothing to write: a moment to look at the disk
            if write is None:
                return
            if isinstance(write, _Write):
                self._write_guarded(write)
            self._check_disk()
            if time.monotonic() - last_prune > PRUNE_EVERY_S:
                last_prune = time.monotonic()
                self._prune()

    def _write_guarded(self, write: _Write) -> None:
        try:
            self._write(write)
        except Exception as exc:  # a bug loses this change's row, never the writer
            self.last_error = f"could not store event {write.change.event.id}: {exc}"
            log.exception("%s", self.last_error)
        finally:
            write.done.set()

    def _write(self, write: _Write) -> None:
        change, event = write.change, write.change.event
        failures = self.watch.failed_writes
        snapshot = self._write_snapshot(event.id, write.jpeg)
        # an event left open by a killed run has its snapshot on disk, not in this run's memory
        has_snapshot = event.id in self._has_snapshot or self._snapshot_on_disk(event.id)
        if change.kind == "end":
            self._has_snapshot.discard(event.id)
        write.payload = change_payload(change, has_snapshot)
        write.body = json.dumps(write.payload).encode()
        with write.lock:
            told = write.told_live  # told and sent already: stored without its messages
        write.position = self._store_row(change, snapshot, write.body, messages=not told)
        self.watch.answered(self._writes.qsize())
        if write.position is None:
            self.lost += 1
            self._keep_unwritten(change)
            return
        self.recorded += 1
        self._unwritten.pop(event.id, None)
        if self.watch.failed_writes == failures:  # snapshot and row both written: storing works (again)
            self.watch.succeeded()
            self._write_unwritten()
        if not told:
            for wake in self.on_stored:
                wake()

    def _keep_unwritten(self, change: EventChange) -> None:
        """The event's latest change the disk did not take, written once it takes rows again (an end lost to a full
        disk left the event open until a restart)."""
        self._unwritten.pop(change.event.id, None)
        self._unwritten[change.event.id] = change
        while len(self._unwritten) > UNWRITTEN_KEPT:
            self._unwritten.pop(next(iter(self._unwritten)))

    def _write_unwritten(self) -> None:
        """Rows the disk refused earlier, now that it takes them: without their messages (they went live then)."""
        for event_id, change in list(self._unwritten.items()):
            body = json.dumps(change_payload(change, event_id in self._has_snapshot)).encode()
            if self._store_row(change, None, body, messages=False) is None:
                return  # failing again: kept for the next time
            self._unwritten.pop(event_id, None)

    def _check_disk(self) -> None:
        try:
            self.watch.check_disk()
        except (OSError, sqlite3.Error) as exc:
            self.watch.failed("making room on the disk", exc)

    def _prune(self) -> None:
        if self.store is None:
            return
        try:
            removed = self.store.prune()
        except Exception:
            log.exception("pruning old events failed")
            return
        if removed:
            log.info("removed %d events past retention", removed)

    def _write_snapshot(self, event_id: str, jpeg: bytes | None) -> tuple[str, int] | None:
        if jpeg is None or self.store is None or not self.watch.snapshots_allowed:
            return None
        try:
            name = self.store.write_snapshot(event_id, jpeg)
        except OSError as exc:
            self.watch.failed("writing a snapshot", exc)
            return None
        self._has_snapshot.add(event_id)
        return name, len(jpeg)

    def _snapshot_on_disk(self, event_id: str) -> bool:
        try:
            return self.store is not None and self.store.snapshot_path(event_id) is not None
        except (OSError, sqlite3.Error, StoreBusy):
            return False

    def _store_row(
        self, change: EventChange, snapshot: tuple[str, int] | None, body: bytes, messages: bool = True
    ) -> float | None:
        """The change's position in the store; None where it could not be stored."""
        if self.store is None:
            return None
        outgoing = [(sink, topic, body, False) for sink, topic in self.destinations] if messages else []
        try:
            return self.store.record(change.event, snapshot, outgoing)
        except (OSError, sqlite3.Error, StoreBusy) as exc:
            self.watch.failed(f"storing the {change.kind} of event {change.event.id}", exc)
            return None
