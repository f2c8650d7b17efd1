"""The recorder thread: event changes from every stream become snapshots, rows and outbox messages.

The decode threads only hand changes over (a bounded queue; they never wait on the disk); here each change gets its
snapshot JPEG (the frame with the object's box), is stored with the messages that announce it in one transaction,
and is then told to whoever listens live (the API's SSE stream, MQTT's retained state).
A change that cannot be stored (a full disk, no writable data folder) is still told live and sent straight to MQTT
where connected (`unstored`), and counted as lost; `storage.py` says when storing fails and works again.
"""

from __future__ import annotations

import json
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from edge_inference.edge.events.builder import EventChange, Snapshot
from edge_inference.edge.events.storage import DISK_CHECK_S, StorageWatch
from edge_inference.edge.events.store import EventStore
from edge_inference.edge.stream.drawing import render_jpeg
from edge_inference.edge.stream.publish import Broadcaster
from edge_inference.models.detection import Detection

log = logging.getLogger("edge.events")
SNAPSHOT_HEIGHT = 720
SNAPSHOT_QUALITY = 85
PRUNE_EVERY_S = 600.0

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
        self._thread = threading.Thread(target=self._run, name="event-recorder", daemon=True)
        self.recorded = 0
        self.lost = 0  # changes not stored: the disk full or too slow, no writable data folder
        self.last_error: str | None = None
        self._has_snapshot: set[str] = set()
        self._overflowing = False

    def start(self) -> None:
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
        """Everything submitted so far is recorded first."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        last_prune = 0.0
        while True:
            try:
                change: EventChange | bool | None = self._queue.get(timeout=DISK_CHECK_S)
            except queue.Empty:
                change = False  # nothing to record: a moment to look at the disk
            if change is None:
                return
            if isinstance(change, EventChange):
                self._overflowing = False
                try:
                    self._record(change)
                except Exception as exc:  # a bug loses this change, never the recorder
                    self.last_error = f"could not record event {change.event.id}: {exc}"
                    log.exception("%s", self.last_error)
            self._check_disk()
            if time.monotonic() - last_prune > PRUNE_EVERY_S:
                last_prune = time.monotonic()
                self._prune()

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

    def _record(self, change: EventChange) -> None:
        event = change.event
        failures = self.watch.failed_writes
        jpeg = snapshot_jpeg(change.snapshot, event.label) if change.snapshot is not None else None
        snapshot = self._write_snapshot(event.id, jpeg)
        # an event left open by a killed run has its snapshot on disk, not in this run's memory
        has_snapshot = event.id in self._has_snapshot or self._snapshot_on_disk(event.id)
        if change.kind == "end":
            self._has_snapshot.discard(event.id)
        payload = change_payload(change, has_snapshot)
        body = json.dumps(payload).encode()
        position = self._store_row(change, snapshot, body)
        if position is not None:
            self.recorded += 1
            if self.watch.failed_writes == failures:  # snapshot and row both written: storing works (again)
                self.watch.succeeded()
            for wake in self.on_stored:
                wake()
        else:
            self.lost += 1
            for send in self.unstored:
                send(body)
        self.changes.publish(RecordedChange(payload, position))
        for listener in self.listeners:
            listener(change, jpeg)

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
        except (OSError, sqlite3.Error):
            return False

    def _store_row(self, change: EventChange, snapshot: tuple[str, int] | None, body: bytes) -> float | None:
        """The change's position in the store; None where it could not be stored."""
        if self.store is None:
            return None
        messages = [(sink, topic, body, False) for sink, topic in self.destinations]
        try:
            return self.store.record(change.event, snapshot, messages)
        except (OSError, sqlite3.Error) as exc:
            self.watch.failed(f"storing the {change.kind} of event {change.event.id}", exc)
            return None
