"""The data folder's failures, on real file systems and a real `edge serve`: a full disk, a damaged database, a
folder that cannot be written. Detection goes on in every case; events reach live listeners (and MQTT where a
broker listens), what is not stored is counted, and health says why, in one log line per change of state.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from edge_inference.edge.config import StorageConfig
from edge_inference.edge.events.storage import StorageWatch, open_store
from edge_inference.edge.events.store import EventQuery
from tests.conftest import REPO, VTEST
from tests.helpers import run_edge
from tests.mosquitto import Broker, Subscriber, require_mosquitto
from tests.mounts import fill, freezable, leave_free, tmpfs
from tests.server import Server, sse_data
from tests.test_events import _event_change, _store

MB = 1024 * 1024


def wait_for(condition: Callable[[], object], what: str, server: Server | None = None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}\n{server.log if server else ''}")
        time.sleep(0.2)


def events_config(tmp_path: Path, data_dir: Path, mqtt: dict | None = None, **storage: object) -> Path:
    """The shipped events example on the pedestrian video, events ending 1 s after their person is lost; `mqtt`:
    settings of its block (the broker's URL comes from EDGE_MQTT_URL)."""
    config = yaml.safe_load((REPO / "deploy/events.example.yaml").read_text())
    config.pop("mqtt")
    if mqtt:
        config["mqtt"] = mqtt
    config["storage"] |= {"data_dir": str(data_dir), **storage}
    stream = config["streams"][0]
    stream["source"] = str(VTEST)
    stream["events"]["end_after_s"] = 1
    path = tmp_path / "events.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def event_figures(server: Server) -> dict:
    return server.client.get("/api/v1/stats").json()["events"]


def readiness(server: Server) -> dict:
    return server.client.get("/health/ready").json()


@pytest.mark.process
def test_a_full_disk_loses_no_live_event_counts_what_it_could_not_store_and_recovers(tmp_path):
    require_mosquitto()
    broker = Broker(tmp_path / "broker")
    broker.start()
    data = tmp_path / "data"
    with tmpfs(data, 4096):
        config = events_config(tmp_path, data, min_free_mb=0)  # the watch would make room; here nothing may
        subscriber = Subscriber(broker, ["edge-inference/+/events"])
        server = Server(["--config", str(config)], tmp_path / "serve.log", env={"EDGE_MQTT_URL": broker.url})
        try:
            server.wait_until("/health/ready", timeout=180)
            wait_for(lambda: event_figures(server)["recorded"] >= 1, "a first event stored", server)
            filler = fill(data)
            wait_for(lambda: event_figures(server)["lost"] >= 2, "changes counted as lost on the full disk", server)
            sent_while_full = len(subscriber.event_changes())
            # live listeners still get every change: SSE now, and MQTT straight from the recorder
            (change,) = sse_data(server.client, "/api/v1/events/stream", "event", 1, timeout=120)
            assert change["type"] in ("start", "update", "end")
            subscriber.wait_for(lambda: len(subscriber.event_changes()) > sent_while_full, what="MQTT while full")
            health = readiness(server)
            assert health["status"] == "degraded" and "the disk is full" in health["problems"][0], health
            assert server.client.get("/health/ready").status_code == 200  # detection works: ready, not down
            figures = event_figures(server)
            assert "the disk is full" in figures["storage_problem"]

            filler.unlink()
            wait_for(lambda: readiness(server)["status"] == "ok", "storing again once there is room", server)
            stored = event_figures(server)["recorded"]
            wait_for(lambda: event_figures(server)["recorded"] > stored, "new events stored", server)
        finally:
            server.stop()
            subscriber.close()
            broker.stop()
    log = server.log
    assert "Traceback" not in log
    assert log.count("events are not being stored") == 1  # one line when it started, not one per event
    assert log.count("storing events works again") == 1


def damage(database: Path) -> None:
    """Garbage over one page in the middle of a database whose header is intact (a torn write, a bad sector)."""
    size = database.stat().st_size
    assert size >= 6 * 4096
    with open(database, "r+b") as file:
        file.seek(4096 * 4)
        file.write(os.urandom(4096))


@pytest.mark.process
def test_a_damaged_database_is_moved_aside_and_the_service_starts_with_a_fresh_one(tmp_path):
    data = tmp_path / "data"
    store = _store(data)
    for i in range(300):
        change = _event_change(event_id=f"old-{i:04d}-{'x' * 40}", start=1000.0 + i, zones=("door", "garden"))
        store.record(change.event, None, [("mqtt", "t/events", b"y" * 300, False)])
    store.close()
    damage(data / "events.db")

    server = Server(["--config", str(events_config(tmp_path, data))], tmp_path / "serve.log")
    try:
        server.wait_until("/health/ready", timeout=180)
        (kept,) = data.glob("events.db.damaged-*")
        assert kept.stat().st_size >= 6 * 4096  # the damaged file is kept, not deleted
        notice = event_figures(server)["storage_notice"]
        assert "damaged (Page " in notice and str(kept) in notice  # SQLite's own words on what is wrong
        wait_for(lambda: event_figures(server)["recorded"] >= 1, "events stored in the fresh database", server)
        listed = server.client.get("/api/v1/events").json()["events"]
        assert listed and not any(e["id"].startswith("old-") for e in listed)
        assert readiness(server)["status"] == "ok"
    finally:
        server.stop()
    assert "Traceback" not in server.log and f"moved to {kept}" in server.log


@pytest.fixture
def read_only_folder(tmp_path: Path):
    """A data folder the service cannot write: a read-only mount as root (root ignores permissions), else 0555."""
    folder = tmp_path / "read-only"
    if os.geteuid() == 0:
        with tmpfs(folder, 1024, read_only=True):
            yield folder
    else:
        folder.mkdir()
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)


@pytest.mark.process
def test_a_data_folder_that_cannot_be_written_leaves_detection_and_live_events_running(tmp_path, read_only_folder):
    config = events_config(tmp_path, read_only_folder)
    server = Server(["--config", str(config)], tmp_path / "serve.log")
    try:
        server.wait_until("/health/ready", timeout=180)
        server.wait_for_frames("walkway", 5, timeout=120)
        (change,) = sse_data(server.client, "/api/v1/events/stream", "event", 1, timeout=120)
        assert change["type"] in ("start", "update", "end")
        health = readiness(server)
        assert health["status"] == "degraded" and "cannot write to" in health["problems"][0], health
        listed = server.client.get("/api/v1/events")
        assert listed.status_code == 503 and "make the folder writable" in listed.json()["detail"]
        assert event_figures(server)["lost"] >= 1
    finally:
        server.stop()
    assert "Traceback" not in server.log

    required = events_config(tmp_path, read_only_folder, required=True)
    result = run_edge("serve", "--config", str(required), "--port", "0")
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "storage.required is true" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.process
def test_a_second_edge_on_the_same_data_folder_leaves_the_first_ones_events_alone(tmp_path):
    """A run by hand beside the systemd service, or two containers on one volume, shared events.db: the second
    ended the first one's open events as "left open by a previous run" (an "end" to MQTT while the person was still
    there) and delivered its outbox a second time. Now the folder is locked while in use: the second serves
    detections and live events, says which process holds the folder, and stores nothing; the lock goes with the
    process however it ends (SIGKILL included), so a restart never finds it stale."""
    data = tmp_path / "data"
    first = Server(["--config", str(events_config(tmp_path, data))], tmp_path / "first.log")
    try:
        first.wait_until("/health/ready", timeout=180)
        wait_for(lambda: event_figures(first)["recorded"] >= 1, "events stored by the first", first)
        second = Server(["--config", str(events_config(tmp_path, data))], tmp_path / "second.log")
        try:
            second.wait_until("/health/ready", timeout=180)
            second.wait_for_frames("walkway", 5, timeout=120)
            health = readiness(second)
            holder = f"in use by edge (process {first.process.pid} on "
            assert health["status"] == "degraded" and holder in health["problems"][0], health
            listed = second.client.get("/api/v1/events")
            assert listed.status_code == 503 and "give this one a folder of its own" in listed.json()["detail"]
            assert event_figures(second)["recorded"] == 0
        finally:
            second.stop()
        assert "left open by a previous run" not in second.log and "Traceback" not in second.log
        required = events_config(tmp_path, data, required=True)
        result = run_edge("serve", "--config", str(required), "--port", "0")
        lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert result.returncode != 0 and len(lines) == 1 and holder in lines[0], result.stderr
        assert readiness(first)["status"] == "ok"  # the first never noticed
    finally:
        first.process.kill()  # SIGKILL: no chance to let go of anything
        first.process.wait()
        first.stop()
    third = Server(["--config", str(events_config(tmp_path, data))], tmp_path / "third.log")
    try:
        third.wait_until("/health/ready", timeout=180)
        wait_for(lambda: event_figures(third)["recorded"] >= 1, "events stored after the first was killed", third)
        assert readiness(third)["status"] == "ok"
    finally:
        third.stop()


@pytest.mark.process
def test_a_disk_running_out_gives_room_from_the_oldest_snapshots_then_pauses_them(tmp_path):
    folder = tmp_path / "small"
    with tmpfs(folder, 8192):
        config = StorageConfig(min_free_mb=4)
        store = open_store(folder, config).store
        assert store is not None
        watch = StorageWatch(store, config)
        for i in range(8):
            change = _event_change(event_id=f"e{i}", start=1000.0 + i)
            name = store.write_snapshot(change.event.id, os.urandom(300 * 1024))
            store.record(change.event, (name, 300 * 1024), [])
        watch.check_disk(now=0)
        assert watch.problem is None  # room enough: nothing touched
        assert all(store.snapshot_path(f"e{i}") for i in range(8))

        first = leave_free(folder, 3 * MB, "first")
        watch.check_disk(now=100)
        kept = [i for i in range(8) if store.snapshot_path(f"e{i}") is not None]
        assert 3 <= len(kept) < 8 and kept == list(range(8 - len(kept), 8)), kept  # the oldest went first
        assert shutil.disk_usage(folder).free >= 4 * MB and watch.snapshots_allowed and watch.problem is None

        second = fill(folder, "second")
        watch.check_disk(now=200)  # every snapshot goes, and that is not enough
        assert all(store.snapshot_path(f"e{i}") is None for i in range(8))
        assert not watch.snapshots_allowed and "storage.min_free_mb" in str(watch.problem)
        assert len(store.query(EventQuery())) == 8  # the events stay; only their pictures went
        first.unlink()
        second.unlink()
        watch.check_disk(now=300)
        assert watch.snapshots_allowed and watch.problem is None
        store.close()


@pytest.mark.process
def test_a_stalled_disk_never_stops_live_events_and_health_says_it_is_stalled(tmp_path):
    """`fsfreeze` on the data folder's file system: detection went on, but SSE and MQTT received no event change for
    the whole stall, `/health/ready` said ok, and `/api/v1/stats` and `/api/v1/events` hung for two minutes behind
    a write holding the store. Now event changes keep reaching SSE and MQTT, health says the storage is stalled,
    the routes that read the store answer (503 at once where they need it), and after the thaw everything told
    live meanwhile is stored."""
    require_mosquitto()
    broker = Broker(tmp_path / "broker")
    broker.start()
    data = tmp_path / "data"
    subscriber = Subscriber(broker, ["edge-inference/+/events", "edge-inference/+/stats"])
    with freezable(data) as disk:
        # a 64 MB file system: below the example's 200; the service's figures over MQTT every second, so some go
        # out while the disk is frozen (they read the outbox's counts from the store: a traceback in the log, once)
        config = events_config(tmp_path, data, mqtt={"stats_interval_s": 1}, min_free_mb=0)
        server = Server(["--config", str(config)], tmp_path / "serve.log", env={"EDGE_MQTT_URL": broker.url})
        try:
            server.wait_until("/health/ready", timeout=180)
            wait_for(lambda: event_figures(server)["recorded"] >= 1, "a first event stored", server)
            disk.freeze()
            sent_before = len(subscriber.event_changes())
            # live changes keep coming while nothing can be written
            changes = sse_data(server.client, "/api/v1/events/stream", "event", 3, timeout=120)
            assert all(change["type"] in ("start", "update", "end") for change in changes)
            subscriber.wait_for(lambda: len(subscriber.event_changes()) > sent_before + 2, what="MQTT while frozen")
            stats_before = len(subscriber.received("/stats"))
            subscriber.wait_for(
                lambda: len(subscriber.received("/stats")) > stats_before + 2, what="stats while frozen"
            )
            wait_for(
                lambda: any("a write has been waiting" in p for p in readiness(server)["problems"]),
                "health to say the storage is stalled",
                server,
            )
            health = readiness(server)
            assert health["status"] == "degraded", health
            stats = server.client.get("/api/v1/stats", timeout=30)
            assert stats.status_code == 200 and "a write has been waiting" in stats.json()["events"]["storage_problem"]
            listed = server.client.get("/api/v1/events", timeout=30)
            # answered either way, never hung: 503 where a row's write holds the database, the events where the
            # write the disk holds is a snapshot's (the database free meanwhile; seen once with both cores busy)
            assert listed.status_code in (200, 503), listed.text
            if listed.status_code == 503:
                assert "stalled or frozen disk" in listed.json()["detail"], listed.text
            recorded = event_figures(server)["recorded"]
            disk.thaw()
            wait_for(lambda: event_figures(server)["recorded"] > recorded, "what was told live stored after", server)
            wait_for(lambda: readiness(server)["status"] == "ok", "healthy again after the thaw", server)
            assert server.client.get("/api/v1/events").status_code == 200
        finally:
            disk.thaw()
            server.stop()
            subscriber.close()
            broker.stop()
    log = server.log
    assert "Traceback" not in log
    assert log.count("a write has been waiting") == 1 and log.count("storage answers again after a") == 1, log


@pytest.mark.process
def test_an_event_whose_end_the_full_disk_refused_is_ended_once_there_is_room(tmp_path):
    """Events whose end was lost to a full disk stayed `end: null` until a restart, and a failed snapshot left a
    zero-byte `.part` file behind for good. The event's latest row is written once the disk takes rows again, and no
    partial file stays."""
    data = tmp_path / "data"
    with tmpfs(data, 4096):
        config = events_config(tmp_path, data, min_free_mb=0)
        server = Server(["--config", str(config)], tmp_path / "serve.log")
        try:
            server.wait_until("/health/ready", timeout=180)
            wait_for(lambda: event_figures(server)["recorded"] >= 1, "a first event stored", server)
            filler = fill(data)
            wait_for(lambda: event_figures(server)["lost"] >= 3, "changes lost on the full disk", server)
            filler.unlink()
            wait_for(lambda: readiness(server)["status"] == "ok", "storing again", server)
            time.sleep(2)  # the walkway's people come and go: ends are written as they come
        finally:
            server.stop()
        # after the stop every event the service saw ended is stored ended: open ones are those still on screen at stop
        assert not list((data / "snapshots").glob(".*.part"))
        store = _store(data)
        try:
            rows = store.query(EventQuery(limit=500))
        finally:
            store.close()
    assert rows and all(row.event.end is not None for row in rows), [r.event.id for r in rows if r.event.end is None]


@pytest.mark.process
def test_a_database_damaged_while_serving_is_moved_aside_as_at_start(tmp_path):
    """Losses were counted and health degraded, but `GET /api/v1/events` answered 500 with a traceback and nothing
    recovered until a restart. Now it is treated as at start: moved aside, a fresh one opened, said; the route
    answers 503 for the read that found it, and events are stored again."""
    data = tmp_path / "data"
    store = _store(data)
    zones = tuple(f"zone-{z:03d}-{'z' * 30}" for z in range(100))  # 4 KB a row: a database larger than SQLite's cache
    for i in range(3000):  # an hour ago, within retention, and ended (none left open for the service to end)
        start = time.time() - 3600 + i
        change = _event_change(event_id=f"old-{i:04d}", start=start, end=start + 1, zones=zones)
        store.record(change.event, None, [])
    store.close()
    server = Server(["--config", str(events_config(tmp_path, data))], tmp_path / "serve.log")
    try:
        server.wait_until("/health/ready", timeout=180)
        size = (data / "events.db").stat().st_size
        with open(data / "events.db", "r+b") as file:  # garbage over half the pages: more than SQLite's cache holds
            file.seek(size // 10 // 4096 * 4096)
            file.write(os.urandom(size // 2 // 4096 * 4096))
        found = server.client.get("/api/v1/events", params={"zone": "nowhere", "limit": 500})  # reads every row whole
        assert found.status_code == 503, (found.status_code, found.text[:300])
        assert "found damaged while serving" in found.json()["detail"], found.text[:300]
        (kept,) = data.glob("events.db.damaged-*")
        assert f"moved to {kept}" in event_figures(server)["storage_notice"]
        wait_for(lambda: server.client.get("/api/v1/events").status_code == 200, "the fresh database read", server)
        recorded = event_figures(server)["recorded"]
        wait_for(lambda: event_figures(server)["recorded"] > recorded, "events stored in the fresh one", server)
        listed = server.client.get("/api/v1/events", params={"limit": 500}).json()["events"]
        assert not any(e["id"].startswith("old-") for e in listed), ([e["id"] for e in listed][:5], server.log[-3000:])
    finally:
        server.stop()
    assert "Traceback" not in server.log and "found damaged while serving" in server.log


def test_a_moved_aside_databases_snapshots_count_under_the_cap(tmp_path):
    """A damaged database's snapshots (7.8 MB in one run) stayed outside the retention cap for good: no row names
    them any more. They count under `max_snapshot_mb`, the oldest going first."""
    data = tmp_path / "data"
    store = _store(data, max_snapshot_mb=1)
    try:
        orphans = []
        for index in range(4):  # 4 x 400 KB left by a database moved aside
            orphan = data / "snapshots" / f"gone-{index}.jpg"
            orphan.write_bytes(b"\xff" * 400_000)
            os.utime(orphan, (1000 + index, 1000 + index))
            orphans.append(orphan)
        store.prune()
    finally:
        store.close()
    kept = [orphan.exists() for orphan in orphans]
    assert kept == [False, False, True, True]  # 1.6 MB -> under 1 MB: the two oldest went


@pytest.mark.process
def test_the_data_folder_follows_the_rule_host_and_port_follow(tmp_path):
    """`storage.data_dir` in the config and EDGE_DATA_DIR disagreed about precedence with host and port: the
    environment silently won (and the systemd unit and the image set it). One rule: the file, then the environment,
    then the default; the start-up log names the folder and where it came from."""
    from edge_inference.edge.config import ServiceConfig
    from edge_inference.edge.events.layer import data_dir_chosen
    from edge_inference.edge.settings import Settings

    in_file, in_env = tmp_path / "from-file", tmp_path / "from-env"
    both = ServiceConfig.model_validate({"streams": [{"id": "a", "source": "0"}], "storage": {"data_dir": in_file}})
    chosen, said = data_dir_chosen(both, Settings(data_dir=in_env))
    assert chosen == in_file and f"EDGE_DATA_DIR={in_env} is not used" in said
    env_only = ServiceConfig.model_validate({"streams": [{"id": "a", "source": "0"}]})
    assert data_dir_chosen(env_only, Settings(data_dir=in_env)) == (in_env, "EDGE_DATA_DIR")
    config = events_config(tmp_path, in_file)
    server = Server(["--config", str(config)], tmp_path / "serve.log", env={"EDGE_DATA_DIR": str(in_env)})
    try:
        server.wait_until("/health/ready", timeout=180)
        wait_for(lambda: event_figures(server)["recorded"] >= 1, "an event stored", server)
    finally:
        server.stop()
    assert (in_file / "events.db").exists() and not in_env.exists()
    assert f"events are kept in {in_file} (storage.data_dir in the config; EDGE_DATA_DIR={in_env}" in server.log


@pytest.mark.process
def test_a_data_folder_under_a_home_that_does_not_exist_is_named_with_the_folder_that_stops_it(
    read_only_folder, monkeypatch
):
    """A service user made without a home (`/nonexistent`): the warning named only `/`, the first folder that
    exists above the data folder. It names the folder meant, the one that cannot be written, and the home."""
    from edge_inference.edge.config import StorageConfig
    from edge_inference.edge.events.storage import storage_outlook

    home = read_only_folder / "nonexistent"
    monkeypatch.setenv("HOME", str(home))
    folder = home / ".local" / "share" / "edge-inference"
    level, said = storage_outlook(folder, StorageConfig())
    assert level == "warning", said
    assert said.startswith(f"events cannot be stored in {folder}: {read_only_folder} (the nearest of its folders")
    assert f"this user's home, {home}, does not exist" in said
