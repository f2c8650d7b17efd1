"""Events: their lifecycle from tracked boxes, the SQLite store (crash-safe, bounded), webhooks on a real server."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import threading
import time
import weakref
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from edge_inference.edge.config import EventsConfig, StorageConfig, WebhookConfig
from edge_inference.edge.events.builder import EventBuilder, EventChange
from edge_inference.edge.events.outbox import OutboxSender
from edge_inference.edge.events.recorder import EventRecorder
from edge_inference.edge.events.storage import StorageWatch
from edge_inference.edge.events.store import EventQuery, EventStore, Message
from edge_inference.edge.events.webhook_sink import Webhook
from edge_inference.edge.stream.tracking import LineState, ZoneState
from edge_inference.models.detection import BoxXYXY, Detection
from tests.inprocess import app_client, service_config
from tests.server import free_port

IMAGE = np.zeros((120, 160, 3), np.uint8)


def person(track_id: int, score: float = 0.8, label: str = "person") -> Detection:
    return Detection(0, label, score, BoxXYXY(10, 10, 50, 100), track_id)


def feed(builder: EventBuilder, frames: list[list[Detection]], start: float = 100.0, dt: float = 0.1, **kw):
    changes: list[EventChange] = []
    for i, detections in enumerate(frames):
        changes += builder.observe(detections, kw.get("zones", ()), kw.get("lines", ()), IMAGE, start + i * dt)
    return changes


def test_an_object_seen_long_enough_starts_an_event_that_ends_once_it_is_lost():
    builder = EventBuilder("cam", EventsConfig(labels=["person"], min_frames=3, end_after_s=1.0))
    changes = feed(builder, [[person(7)]] * 10)
    assert [c.kind for c in changes] == ["start"]
    start = changes[0]
    assert start.event.track_id == 7 and start.event.end is None and start.snapshot is not None
    assert start.event.start == pytest.approx(100.2)  # its third sighting
    assert feed(builder, [[]] * 5, start=101.0) == []  # lost for less than end_after_s: still going on
    (end,) = feed(builder, [[]], start=102.0)
    assert end.kind == "end" and end.event.id == start.event.id
    assert end.event.end == pytest.approx(100.9) and end.event.frames == 10  # ends when last seen


def test_an_event_stays_open_while_the_tracker_may_still_match_its_track():
    """The tracker keeps a lost track for `lost_after_s` of frames (longer in seconds when a slow machine processes
    fewer frames than the source gives) and may match it again. An event that had ended on `end_after_s` then came
    back as a second event under the same track id: one person, two starts for Home Assistant. It now stays open
    while its track is held, goes on when the object is matched again, and ends once the tracker lets go."""
    builder = EventBuilder("cam", EventsConfig(labels=["person"], min_frames=3, end_after_s=1.0))
    held = frozenset({7})
    changes = [c for i in range(10) for c in builder.observe([person(7)], (), (), IMAGE, 100 + i * 0.1, held=held)]
    lost = [c for i in range(20) for c in builder.observe([], (), (), IMAGE, 101 + i * 0.1, held=held)]  # 2 s
    back = [c for i in range(5) for c in builder.observe([person(7)], (), (), IMAGE, 103 + i * 0.1, held=held)]
    assert [c.kind for c in changes] == ["start"] and lost == [] and [c.kind for c in back] == []
    gone = [c for i in range(15) for c in builder.observe([], (), (), IMAGE, 103.5 + i * 0.1)]  # the tracker let go
    (end,) = gone
    assert end.kind == "end" and end.event.id == changes[0].event.id and end.event.track_id == 7
    assert end.event.frames == 15 and end.event.end == pytest.approx(103.4)  # both sightings, one event
    assert builder.active == []


def test_a_jump_of_the_wall_clock_neither_ends_an_event_nor_keeps_it_open():
    """A Pi has no clock of its own: NTP sets it after boot, hours at a time. Durations were measured on the wall
    clock, so a jump forward ended every event and started it again, and one back kept events open for hours."""
    builder = EventBuilder("cam", EventsConfig(labels=["person"], min_frames=3, end_after_s=1.0))
    hours = 3 * 3600.0
    frames = [(100 + i * 0.1 + (hours if i >= 5 else 0), 50 + i * 0.1) for i in range(10)]  # (wall, monotonic)
    changes = [c for wall, mono in frames for c in builder.observe([person(7)], (), (), IMAGE, wall, mono)]
    assert [c.kind for c in changes] == ["start"]
    # the person leaves as the wall clock goes back the three hours: the event ends a second later all the same
    lost = [builder.observe([], (), (), IMAGE, 100.9 + i * 0.1, 50.9 + i * 0.1) for i in range(1, 20)]
    assert [len(c) for c in lost] == [0] * 9 + [1] + [0] * 9
    end = lost[9][0]
    assert end.kind == "end" and end.event.start == pytest.approx(100.2)  # stamps are the wall clock's
    assert end.event.end == pytest.approx(frames[-1][0]) and end.event.frames == 10


def test_one_noisy_box_a_low_score_or_another_label_makes_no_event():
    builder = EventBuilder("cam", EventsConfig(labels=["person"], min_score=0.6, min_frames=3))
    flicker = [[person(1)], [], [], [person(1)], [], []]  # seen twice, far apart
    faint = [[person(2, score=0.4)]] * 20
    cars = [[person(3, label="car")]] * 20
    assert feed(builder, flicker) + feed(builder, faint) + feed(builder, cars) == []
    assert [c.kind for c in builder.finish(200.0)] == []


def test_zones_gate_events_and_entering_a_zone_or_crossing_a_line_updates_them():
    builder = EventBuilder("cam", EventsConfig(labels=["person"], zones=["door"], min_frames=2))
    outside = ZoneState("door", {}, frozenset())
    inside = ZoneState("door", {"person": 1}, frozenset({5}))
    assert feed(builder, [[person(5)]] * 5, zones=(outside,)) == []  # seen, but not where it matters
    changes = feed(builder, [[person(5)]] * 2, zones=(inside,), start=101.0)
    assert [c.kind for c in changes] == ["start"] and changes[0].event.zones == ("door",)
    crossing = LineState("gate", 1, 0, just_in=frozenset({5}))
    (update,) = builder.observe([person(5)], (inside,), (crossing,), IMAGE, 101.5)
    assert update.kind == "update" and update.event.lines == ("gate:in",)
    (end,) = builder.finish(102.0)
    assert end.kind == "end" and end.event.zones == ("door",) and end.event.lines == ("gate:in",)


def test_a_clearly_better_view_replaces_the_snapshot_at_most_every_two_seconds():
    builder = EventBuilder("cam", EventsConfig(min_frames=1))
    changes = feed(builder, [[person(9, score=0.55 + 0.01 * i)] for i in range(40)])
    kinds = [c.kind for c in changes]
    assert kinds[0] == "start" and set(kinds[1:]) == {"update"}
    with_snapshots = [c for c in changes if c.snapshot is not None]
    assert 2 <= len(with_snapshots) <= 3  # 4 s of a slowly improving score
    assert changes[-1].event.best_score == pytest.approx(with_snapshots[-1].snapshot.score)


def test_frames_are_kept_only_until_their_snapshot_is_sent():
    """A frame is a megabyte or more: 20 people in view must not keep 20 of them alive once their snapshots have
    gone to the recorder; only a clearly better view, waiting for its turn, keeps one."""
    builder = EventBuilder("cam", EventsConfig(min_frames=1))
    alive: list[weakref.ref[np.ndarray]] = []
    for i in range(50):  # 5 s, a fresh frame each time as a camera gives them; scores steady after the first
        frame = np.zeros((120, 160, 3), np.uint8)
        alive.append(weakref.ref(frame))
        changes = builder.observe([person(n, score=0.7) for n in range(20)], (), (), frame, 100.0 + i * 0.1)
        if i == 0:
            assert len(changes) == 20 and all(c.snapshot is not None for c in changes)
        del changes, frame
    assert sum(ref() is not None for ref in alive) == 0
    (improved,) = builder.observe([person(3, score=0.9)], (), (), np.zeros((120, 160, 3), np.uint8), 105.0)
    assert improved.snapshot is not None and improved.snapshot.score == 0.9  # still sent: the view got better


def _event_change(kind: str = "start", event_id: str = "e1", start: float = 1000.0, **fields) -> EventChange:
    builder = EventBuilder("cam", EventsConfig(min_frames=1))
    (change,) = builder.observe([person(1)], (), (), IMAGE, start)
    event = change.event.__class__(**{**change.event.__dict__, "id": event_id, **fields})
    return EventChange(kind, event, change.snapshot)  # type: ignore[arg-type]


def _store(tmp_path: Path, **limits) -> EventStore:
    return EventStore(tmp_path, StorageConfig(**limits))


def test_the_store_keeps_events_and_messages_together_and_pages_newest_first(tmp_path):
    store = _store(tmp_path)
    for i in range(7):
        change = _event_change(event_id=f"e{i}", start=1000.0 + i, zones=("door",) if i % 2 else ())
        store.record(change.event, None, [("mqtt", "t/events", b"%d" % i, False)])
    assert store.outbox_counts() == {"mqtt": {"waiting": 7, "dropped": 0}}
    assert [m.payload for m in store.pending("mqtt", 3)] == [b"0", b"1", b"2"]  # in the order stored
    first = store.query(EventQuery(limit=3))
    assert [e.event.id for e in first] == ["e6", "e5", "e4"]
    last = first[-1].event
    second = store.query(EventQuery(limit=3, cursor=(last.start, last.id)))
    assert [e.event.id for e in second] == ["e3", "e2", "e1"]
    assert [e.event.id for e in store.query(EventQuery(zone="door"))] == ["e5", "e3", "e1"]
    assert [e.event.id for e in store.query(EventQuery(after=1002.0, before=1004.0))] == ["e3", "e2"]
    store.close()
    mode = sqlite3.connect(tmp_path / "events.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


@pytest.mark.process
def test_what_a_killed_process_committed_is_there_after_a_restart(tmp_path):
    """A child stores events and is SIGKILLed without closing anything; every recorded event survives."""
    script = f"""
import os, signal, sys
sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
from tests.test_events import _event_change, _store
from pathlib import Path
store = _store(Path({str(tmp_path)!r}))
for i in range(50):
    change = _event_change(event_id=f"e{{i}}", start=1000.0 + i)
    store.record(change.event, None, [("mqtt", "t", b"x", False)])
print("recorded", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert child.returncode == -9 and "recorded" in child.stdout, child.stderr
    store = _store(tmp_path)
    assert len(store.query(EventQuery(limit=500))) == 50
    assert store.outbox_counts()["mqtt"]["waiting"] == 50


def test_retention_by_age_and_count_and_a_cap_on_snapshot_disk_use(tmp_path):
    store = _store(tmp_path, max_age_days=1, max_events=10, max_snapshot_mb=0.01)  # 10 kB of snapshots
    now = 1_000_000.0
    for i in range(15):
        change = _event_change(event_id=f"e{i:02d}", start=now - 3600 * i)
        name = store.write_snapshot(change.event.id, b"\xff" * 3000)
        store.record(change.event, (name, 3000), [])
    old = _event_change(event_id="ancient", start=now - 3 * 86400)
    store.record(old.event, None, [])
    removed = store.prune(now)
    kept = [e.event.id for e in store.query(EventQuery(limit=100))]
    assert removed == 6 and kept == [f"e{i:02d}" for i in range(10)]  # past a day, or beyond 10 events
    with_snapshots = [e for e in kept if store.snapshot_path(e) is not None]
    assert with_snapshots == ["e00", "e01", "e02"]  # the newest 9 kB; the oldest snapshots went first
    assert len(list((tmp_path / "snapshots").glob("*.jpg"))) == 3


def test_a_full_outbox_drops_its_oldest_messages_and_says_how_many(tmp_path, caplog):
    store = _store(tmp_path, max_outbox=100)
    for i in range(130):
        store.record(_event_change(event_id=f"e{i}").event, None, [("mqtt", "t", b"%d" % i, False)])
    assert store.outbox_counts() == {"mqtt": {"waiting": 100, "dropped": 30}}
    assert store.pending("mqtt", 1)[0].payload == b"30"
    assert "outbox for mqtt is full" in caplog.text


class _Hooks(BaseHTTPRequestHandler):
    received: ClassVar[list[dict]] = []
    refuse = 0  # answer this many requests with 503 first
    reject: ClassVar[set[str]] = set()  # event ids answered 422 for good
    too_many = 0  # answer this many requests with 429 (try again) first

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if json.loads(body)["event"]["id"] in _Hooks.reject:
            self.send_response(422)
        elif _Hooks.too_many > 0:
            _Hooks.too_many -= 1
            self.send_response(429)
        elif _Hooks.refuse > 0:
            _Hooks.refuse -= 1
            self.send_response(503)
        else:
            _Hooks.received.append(json.loads(body))
            self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _webhook_delivery(tmp_path, refuse: int = 0, reject: frozenset[str] = frozenset(), too_many: int = 0):
    """A real HTTP receiver (`_Hooks`), a store, a recorder and a webhook sender, running; stopped afterwards."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hooks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Hooks.received, _Hooks.refuse, _Hooks.reject, _Hooks.too_many = [], refuse, set(reject), too_many
    store = _store(tmp_path)
    hook = Webhook(0, WebhookConfig.model_validate({"url": f"http://127.0.0.1:{server.server_port}/hook"}))
    recorder = EventRecorder(store, [(hook.sink, "event")], StorageWatch(store, store.config))
    sender = OutboxSender(store, hook.sink, hook.deliver)
    recorder.on_stored.append(sender.wake.set)
    recorder.start()
    sender.start()
    try:
        yield store, hook, recorder
    finally:
        sender.stop()
        recorder.stop()
        server.shutdown()
        _Hooks.reject = set()


def _until(condition, hook: Webhook) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, (_Hooks.received, hook.last_error)
        time.sleep(0.05)


@pytest.mark.process
def test_webhooks_get_every_change_in_order_and_retry_until_accepted(tmp_path):
    with _webhook_delivery(tmp_path, refuse=2) as (store, hook, recorder):
        recorder.submit([_event_change("start", "a"), _event_change("update", "a"), _event_change("start", "b")])
        _until(lambda: len(_Hooks.received) >= 3, hook)
    assert [(m["type"], m["event"]["id"]) for m in _Hooks.received] == [("start", "a"), ("update", "a"), ("start", "b")]
    assert _Hooks.received[0]["event"]["has_snapshot"] is True
    assert store.outbox_counts()[hook.sink]["waiting"] == 0
    assert store.snapshot_path("a") is not None and store.snapshot_path("a").read_bytes()[:2] == b"\xff\xd8"


@pytest.mark.process
def test_a_webhook_that_refuses_an_event_for_good_does_not_block_the_ones_after_it(tmp_path):
    """A 4xx (but 408/429) is counted as rejected and skipped; 429 is retried; every later event still arrives."""
    with _webhook_delivery(tmp_path, reject=frozenset({"bad"}), too_many=2) as (store, hook, recorder):
        recorder.submit([_event_change("start", "a"), _event_change("start", "bad"), _event_change("start", "c")])
        _until(lambda: len(_Hooks.received) >= 2 and not store.outbox_counts()[hook.sink]["waiting"], hook)
    assert [m["event"]["id"] for m in _Hooks.received] == ["a", "c"]
    assert hook.rejected == 1  # counted once, and the 429s were retried, not rejected


@pytest.mark.process
def test_a_webhook_that_cannot_take_events_is_said_in_health_until_it_can(tmp_path):
    """A receiver that is down (Home Assistant restarting) or answers 5xx was one log line in urllib's words
    ("<urlopen error [Errno 111] Connection refused>"), `/stats` `last_error: null` and health ok while the outbox
    grew. Now it is said as a camera's or a broker's failed connection, and health is degraded until it takes them."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/api/webhook/edge-s3cret-id"  # Home Assistant: the id is as good as a password
    message = Message(1, "webhook:0", "", json.dumps({"event": {"id": "a"}}).encode(), False)
    hook = Webhook(0, WebhookConfig.model_validate({"url": url}))
    assert hook.deliver([message]) == 0 and hook.failing
    assert hook.last_error == (
        f"webhook 0 (http://127.0.0.1:{port}/…) cannot take events: nothing listens at 127.0.0.1:{port}: check the "
        "address and port, and that the receiver runs; they wait in the outbox and are sent again"
    )
    server = ThreadingHTTPServer(("127.0.0.1", port), _Hooks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Hooks.received, _Hooks.refuse = [], 1
    try:
        assert hook.deliver([message]) == 0 and hook.failing
        assert (
            hook.last_error is not None and "cannot take events: answered 503 Service Unavailable;" in hook.last_error
        )
        assert hook.deliver([message]) == 1 and not hook.failing and hook.last_error is None
    finally:
        server.shutdown()
        server.server_close()
    assert [m["event"]["id"] for m in _Hooks.received] == ["a"]

    config = service_config(events={}).model_copy(
        update={"webhooks": [WebhookConfig(url=url)], "storage": StorageConfig(data_dir=tmp_path / "data")}
    )
    with app_client(config) as client:
        deadline = time.monotonic() + 180
        health = client.get("/health/ready").json()
        while not any("cannot take events: nothing listens" in problem for problem in health["problems"]):
            assert time.monotonic() < deadline, health
            time.sleep(0.2)
            health = client.get("/health/ready").json()
        assert health["status"] == "degraded"
        assert "cannot take events" in client.get("/api/v1/stats").json()["events"]["last_error"]
        assert "s3cret" not in client.get("/api/v1/stats").text + client.get("/health/ready").text


def test_a_delivery_that_outlives_the_stop_does_not_write_to_the_closed_store(tmp_path):
    """At shutdown the store closes after the senders' join timeout; a delivery still waiting (a PUBACK that never
    comes) must not raise into the log when it returns: its messages stay for the next start."""
    store = _store(tmp_path)
    store.record(_event_change(event_id="a").event, None, [("slow", "t", b"1", False)])
    started, release = threading.Event(), threading.Event()
    errors: list[BaseException | None] = []

    def slow(messages):
        started.set()
        release.wait(30)
        return len(messages)

    previous = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    try:
        sender = OutboxSender(store, "slow", slow)
        sender.start()
        assert started.wait(30)
        sender.stop(timeout=0.1)
        store.close()
        release.set()
        sender._thread.join(30)
    finally:
        threading.excepthook = previous
    assert not sender._thread.is_alive() and errors == []


def test_broker_urls_are_parsed_and_their_passwords_never_shown():
    from edge_inference.edge.config import ConfigError, MqttConfig
    from edge_inference.edge.events.mqtt import parse_broker

    broker = parse_broker("mqtts://home:s3cr%40t@broker.local", MqttConfig())
    assert (broker.host, broker.port, broker.tls, broker.username, broker.password) == (
        "broker.local", 8883, True, "home", "s3cr@t"
    )  # fmt: skip
    assert "s3cr" not in broker.description
    with pytest.raises(ConfigError) as bad:
        parse_broker("http://home:s3cret@broker.local", MqttConfig())
    assert "s3cret" not in str(bad.value) and "mqtt://" in str(bad.value)
