"""A client of the stored events' SSE stream that was away (Wi-Fi gone, the service restarted) is told what it
missed when it comes back with its Last-Event-ID, as browsers' EventSource sends it by itself."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
import time

import httpx
import pytest

from edge_inference.edge.config import StorageConfig
from edge_inference.edge.events.builder import Event
from edge_inference.edge.events.recorder import RecordedChange, missed_changes
from edge_inference.edge.events.store import EventStore
from edge_inference.edge.stream.publish import Broadcaster
from edge_inference.service.api.events import change_feed
from tests.server import Server
from tests.test_events_api import events_config

Change = tuple[str | None, str, str]  # (SSE id, change type, event id)
PATH = "/api/v1/events/stream"


def read_changes(response: httpx.Response, into: list[Change], enough=lambda changes: False, limit=240.0) -> None:
    """SSE as EventSource reads it: fields up to a blank line make one message; stops when `enough` says so, the
    stream ends or `limit` seconds have passed."""
    deadline = time.monotonic() + limit
    fields: dict[str, str] = {}
    lines = response.iter_lines()
    while time.monotonic() < deadline:
        try:
            line = next(lines)
        except (StopIteration, httpx.ReadTimeout):
            return
        if line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
            continue
        if fields.get("event") == "event":
            data = json.loads(fields["data"])
            into.append((fields.get("id"), data["type"], data["event"]["id"]))
            if enough(into):
                return
        fields = {}


def stream_changes(base: str, into: list[Change], enough=lambda changes: False, last_id=None, limit=240.0) -> None:
    headers = {"Last-Event-ID": last_id} if last_id else {}
    with (
        httpx.Client(base_url=base, timeout=httpx.Timeout(10, read=30)) as client,
        client.stream("GET", PATH, headers=headers) as response,
    ):
        assert response.status_code == 200
        read_changes(response, into, enough, limit)


def listen_until_closed(base: str, into: list[Change]) -> threading.Thread:
    thread = threading.Thread(target=stream_changes, args=(base, into), kwargs={"limit": 600}, daemon=True)
    thread.start()
    return thread


def wait_for(condition, what: str, server: Server, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}:\n{server.log[-3000:]}"
        time.sleep(0.2)


@pytest.mark.process
def test_a_client_that_was_away_across_a_restart_is_told_every_start_and_end_it_missed(tmp_path):
    config = ["--config", events_config(tmp_path)]
    first = Server(config, tmp_path / "first.log")
    try:
        first.wait_until("/health/ready", timeout=180)
        stayed: list[Change] = []  # a client that stays connected: what happened, independently of any replay
        stayer = listen_until_closed(first.base, stayed)
        seen: list[Change] = []
        stream_changes(first.base, seen, lambda changes: len(changes) >= 3)
        last_id = seen[-1][0]
        assert last_id is not None and all(change_id for change_id, *_ in seen)

        def gap() -> list[Change]:
            return [c for c in list(stayed) if c[0] is not None and float(c[0]) > float(last_id)]

        # away while people come and go: starts and ends both happen
        wait_for(lambda: {"start", "end"} <= {kind for _, kind, _ in gap()}, "no start and end while away", first)
    finally:
        first.stop()
    stayer.join(30)
    missed = gap()

    second = Server(config, tmp_path / "second.log", port=first.port)  # the same data folder, restarted
    try:
        second.wait_until("/health/ready", timeout=180)
        wanted = {(kind, event) for _, kind, event in missed if kind in ("start", "end")}
        updated = {event for _, kind, event in missed if kind == "update"}
        told: list[Change] = []

        def caught_up(changes: list[Change]) -> bool:
            got = {(kind, event) for _, kind, event in changes}
            return wanted <= got and updated <= {event for _, _, event in changes}

        stream_changes(second.base, told, caught_up, last_id=last_id)
    finally:
        second.stop()
    assert caught_up(told), f"missed {wanted - {(k, e) for _, k, e in told}} of {len(wanted)}; told {told[:5]}"
    ids = [float(change_id) for change_id, *_ in told if change_id is not None]
    assert ids == sorted(ids) and ids[0] > float(last_id)  # in order, and nothing from before it came again
    started_before = {event for _, kind, event in seen if kind == "start"}
    assert not started_before & {event for _, kind, event in told if kind == "start"}


def _event(event_id: str, start: float, end: float | None = None) -> Event:
    return Event(event_id, "door", "person", 1, start, end, 0.9, (), (), 5)


def test_a_database_from_before_positions_resumes_and_positions_never_go_back(tmp_path, monkeypatch):
    """events.db written by an earlier version (no first_recorded column) opens, and its rows are told as they are;
    a wall clock set back (a Pi's NTP correction) does not put a change before one a client has seen."""
    folder = tmp_path / "data"
    folder.mkdir()
    old = sqlite3.connect(folder / "events.db")
    old.executescript(
        """CREATE TABLE events (
        id TEXT PRIMARY KEY, stream TEXT NOT NULL, label TEXT NOT NULL, track_id INTEGER NOT NULL,
        start REAL NOT NULL, "end" REAL, best_score REAL NOT NULL, zones TEXT NOT NULL, lines TEXT NOT NULL,
        frames INTEGER NOT NULL, snapshot TEXT, snapshot_bytes INTEGER NOT NULL DEFAULT 0, updated REAL NOT NULL);
        INSERT INTO events VALUES ('old', 'door', 'person', 1, 1000.0, 1010.0, 0.9, '[]', '[]', 5, NULL, 0, 1011.0);"""
    )
    old.commit()
    old.close()
    store = EventStore(folder, StorageConfig())
    try:
        assert store.position == 1011.0
        (replayed,) = missed_changes(store, 1005.0)
        assert replayed.payload["type"] == "end" and replayed.position == 1011.0
        first = store.record(_event("new", 2000.0), None, [])
        monkeypatch.setattr(time, "time", lambda: first - 3600)  # the clock set back an hour
        second = store.record(_event("new", 2000.0, 2005.0), None, [])
        assert second > first
        told = missed_changes(store, 1011.0)
        assert [(c.payload["type"], c.payload["event"]["id"], c.position) for c in told] == [  # type: ignore[index]
            ("start", "new", first),
            ("end", "new", second),
        ]
        assert [c.payload["type"] for c in missed_changes(store, first)] == ["end"]
    finally:
        store.close()


def test_a_client_too_slow_for_the_changes_is_sent_the_ones_its_buffer_dropped(tmp_path):
    """The live buffer of a client keeps its newest changes; one that fell behind gets the rest from the store."""
    store = EventStore(tmp_path, StorageConfig())
    changes: Broadcaster[RecordedChange] = Broadcaster()

    def record(event: Event, kind: str) -> float:
        position = store.record(event, None, [])
        changes.publish(RecordedChange({"type": kind, "event": event.to_dict() | {"has_snapshot": False}}, position))
        return position

    async def read() -> list[tuple[str, str]]:
        feed = change_feed(changes.subscribe(4), store, store.position, replay=False)
        told: list[RecordedChange] = []
        for number in range(12):  # 24 changes into a buffer of 4 before the client reads
            record(_event(f"e{number}", 1000.0 + number), "start")
            record(_event(f"e{number}", 1000.0 + number, 1001.0 + number), "end")
        with contextlib.suppress(TimeoutError):  # without the store's help the feed waits for ever: say what it told
            async with asyncio.timeout(120):
                async for change in feed:
                    told.append(change)
                    if len(told) == 24:
                        break
        positions = [change.position for change in told]
        assert positions == sorted(positions) and len(set(positions)) == len(positions)
        return [(str(c.payload["type"]), str(c.payload["event"]["id"])) for c in told]  # type: ignore[index]

    try:
        told = asyncio.run(read())
    finally:
        store.close()
    assert told == [(kind, f"e{number}") for number in range(12) for kind in ("start", "end")]
