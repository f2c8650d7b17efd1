"""Events over MQTT against a real Mosquitto broker, with the service as a user runs it (`edge serve`).

The people walking in vtest.avi make the events; the broker is stopped and restarted by its pid, the service is
SIGKILLed; a consumer with a persistent session checks what arrived.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

from edge_inference.edge.events.mqtt import RECONNECT_MAX_S
from tests.conftest import REPO, VTEST
from tests.mosquitto import Broker, Subscriber, require_mosquitto
from tests.server import Server

pytestmark = pytest.mark.process

DEVICE = "test-device"
BASE = f"edge-inference/{DEVICE}"


@pytest.fixture
def broker(tmp_path: Path):
    require_mosquitto()
    broker = Broker(tmp_path / "broker")
    broker.start()
    yield broker
    broker.stop()


def service_config(tmp_path: Path) -> Path:
    """The shipped example, made quick to observe: events end 1 s after their person is lost."""
    config = yaml.safe_load((REPO / "deploy/events.example.yaml").read_text())
    stream = config["streams"][0]
    stream["source"] = str(VTEST)
    stream["events"]["end_after_s"] = 1
    config["mqtt"] |= {"device_id": DEVICE, "stats_interval_s": 2}
    path = tmp_path / "events.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def start_service(tmp_path: Path, broker: Broker, log_name: str = "serve.log") -> Server:
    env = {"EDGE_MQTT_URL": broker.url, "EDGE_DATA_DIR": str(tmp_path / "data")}
    server = Server(["--config", str(service_config(tmp_path))], tmp_path / log_name, env=env)
    server.wait_until("/health/ready", timeout=180)
    return server


def by_event(changes: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for change in changes:
        grouped[change["event"]["id"]].append(change)
    return grouped


def api_events(server: Server) -> list[dict]:
    events, cursor = [], None
    while True:
        page = server.client.get("/api/v1/events", params={"limit": 100, **({"cursor": cursor} if cursor else {})})
        assert page.status_code == 200, page.text
        events += page.json()["events"]
        cursor = page.json()["next"]
        if cursor is None:
            return events


def started_since(server: Server, moment: float) -> bool:
    return any(e["start"] >= moment for e in api_events(server))


def outbox_waiting(server: Server) -> int:
    return server.client.get("/api/v1/stats").json()["events"]["outbox"]["mqtt"]["waiting"]


def ended(subscriber: Subscriber) -> int:
    return sum(1 for c in subscriber.event_changes() if c["type"] == "end")


def test_people_walking_become_start_and_end_events_with_home_assistant_discovery(tmp_path, broker):
    subscriber = Subscriber(broker, ["edge-inference/#", "homeassistant/#"])
    server = start_service(tmp_path, broker)
    try:
        subscriber.wait_for(lambda: ended(subscriber) >= 3, what="three events to end")
        assert server.client.get("/api/v1/streams/walkway/snapshot.jpg?zones=true").status_code == 200
    finally:
        server.stop()
        subscriber.close()
    events = by_event(subscriber.event_changes())
    finished = {i: changes for i, changes in events.items() if changes[-1]["type"] == "end"}
    assert len(finished) >= 3
    for changes in finished.values():
        assert changes[0]["type"] == "start" and [c["type"] for c in changes[1:-1]] == ["update"] * (len(changes) - 2)
        assert len({c["event"]["track_id"] for c in changes}) == 1  # one person, one track id, start to end
        end = changes[-1]["event"]
        # an event starts on its min_frames-th sighting: one that qualifies on its last sighting has start == end
        assert end["label"] == "person" and end["stream"] == "walkway" and end["start"] <= end["end"]
        assert end["best_score"] >= 0.5 and end["frames"] >= 3 and end["has_snapshot"]
    assert len({changes[0]["event"]["track_id"] for changes in finished.values()}) == len(finished)

    # Home Assistant discovery: one device, a binary sensor per label, counts per zone and line, the snapshot
    configs = {m.topic: m.json() for m in subscriber.received("/config") if m.topic.startswith("homeassistant/")}
    sensor = configs[f"homeassistant/binary_sensor/{DEVICE.replace('-', '_')}_walkway_person_detected/config"]
    assert sensor["state_topic"] == f"{BASE}/walkway/person" and sensor["payload_on"] == "ON"
    assert sensor["availability_mode"] == "all"
    assert {a["topic"] for a in sensor["availability"]} == {f"{BASE}/availability", f"{BASE}/walkway/availability"}
    components = {topic.split("/")[1] for topic in configs}
    assert components == {"binary_sensor", "sensor", "image"}
    assert len({json.dumps(c["device"], sort_keys=True) for c in configs.values()}) == 1  # grouped as one device
    assert all(c["unique_id"] and c["name"] for c in configs.values())
    image = next(c for t, c in configs.items() if t.split("/")[1] == "image")
    assert image["image_topic"] == f"{BASE}/walkway/snapshot" and image["content_type"] == "image/jpeg"
    zone = next(c for c in configs.values() if c.get("state_topic", "").endswith("/zones/crossing"))
    assert zone["state_class"] == "measurement"
    # the state those entities read
    assert {m.payload for m in subscriber.received("/walkway/person")} == {b"ON", b"OFF"}
    assert subscriber.received("/walkway/snapshot")[-1].payload[:2] == b"\xff\xd8"  # a JPEG
    # the stream says offline while its model loads and online once it delivers (a slow load is not a failure)
    assert b"online" in {m.payload for m in subscriber.received("/walkway/availability")}
    attributes = subscriber.received("/walkway/person/attributes")[-1].json()
    assert attributes["event_id"] and 0.5 <= attributes["score"] <= 1 and attributes["snapshot_url"].endswith(".jpg")
    assert {m.payload for m in subscriber.received("/walkway/person/count")} >= {b"0", b"1"}
    assert sensor["json_attributes_topic"] == f"{BASE}/walkway/person/attributes" and sensor["origin"]["name"]
    assert subscriber.received(f"{BASE}/availability")[-1].payload == b"offline"  # said on a clean stop
    assert "outbox" in subscriber.received("/stats")[-1].json()


def test_events_made_while_the_broker_is_down_arrive_in_order_once_it_is_back(tmp_path, broker):
    subscriber = Subscriber(broker, [f"{BASE}/events"])
    server = start_service(tmp_path, broker)
    try:
        subscriber.wait_for(lambda: len(subscriber.event_changes()) >= 1, what="a first event")
        broker.stop()
        down_at = time.time()
        deadline = time.monotonic() + 120
        # past the client's longest wait between reconnection attempts, and people kept walking into new events
        outage_s = 2 * RECONNECT_MAX_S
        while time.time() - down_at < outage_s or outbox_waiting(server) < 3 or not started_since(server, down_at):
            assert time.monotonic() < deadline, server.log
            time.sleep(0.5)
        up_at = time.time()
        broker.start()
        subscriber.wait_for(lambda: outbox_waiting(server) == 0, what="the outbox to empty")
        made_meanwhile = [e for e in api_events(server) if down_at <= e["start"] <= up_at]
        wanted = {e["id"] for e in made_meanwhile}
        subscriber.wait_for(lambda: wanted <= set(by_event(subscriber.event_changes())), what="every event")
    finally:
        server.stop()
        subscriber.close()
    assert made_meanwhile, "no event started while the broker was down"
    changes = subscriber.event_changes()
    events = by_event(changes)
    for event_id in wanted:
        kinds = [c["type"] for c in events[event_id]]
        assert kinds[0] == "start", kinds  # start precedes everything else about the event
        assert "end" not in kinds or kinds[-1] == "end", kinds  # and its end comes last
    first_seen = list(dict.fromkeys((c["event"]["start"], c["event"]["id"]) for c in changes if c["type"] == "start"))
    assert [s for s, _ in first_seen] == sorted(s for s, _ in first_seen)  # delivered in the order they happened
    duplicates = len(changes) - len({(c["event"]["id"], c["type"], c["event"]["frames"]) for c in changes})
    print(f"duplicates after the outage: {duplicates} of {len(changes)}")
    assert duplicates <= 50  # at-least-once: at most one batch in flight when the broker went away


def test_events_shown_before_a_sigkill_are_kept_and_delivered_after_a_restart(tmp_path, broker):
    subscriber = Subscriber(broker, [f"{BASE}/events"])
    server = start_service(tmp_path, broker)
    try:
        subscriber.wait_for(lambda: len(subscriber.event_changes()) >= 1, what="a first event")
        broker.stop()  # what follows waits in the outbox: the kill must not lose it
        deadline = time.monotonic() + 120
        while outbox_waiting(server) < 3:
            assert time.monotonic() < deadline, server.log
            time.sleep(0.2)
        shown = {e["id"]: e for e in api_events(server)}
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(30)
    finally:
        server.stop()
    broker.start()
    server = start_service(tmp_path, broker, "serve-after-kill.log")
    try:
        kept = {e["id"]: e for e in api_events(server)}
        assert set(shown) <= set(kept)
        for event_id, event in shown.items():
            assert kept[event_id]["start"] == event["start"] and kept[event_id]["track_id"] == event["track_id"]
        subscriber.wait_for(lambda: set(shown) <= set(by_event(subscriber.event_changes())), what="delivery")
        # events the kill left open are ended by the restart, and that is said too
        left_open = {i for i, e in shown.items() if e["end"] is None}
        subscriber.wait_for(
            lambda: all(by_event(subscriber.event_changes())[i][-1]["type"] == "end" for i in left_open),
            what="left-open events to end",
        )
    finally:
        server.stop()
        subscriber.close()
    assert "ending" in server.log and "left open by a previous run" in server.log


def test_a_broker_away_from_the_start_is_said_and_its_events_arrive_once_it_listens(tmp_path):
    """A broker down when edge starts (a Pi booting before the Home Assistant box), or a name that does not resolve
    (`homeassistant.local` inside a container): paho retries in silence (no on_disconnect without a connection), so
    nothing was logged, /stats said `last_error: null`, health read ok and the outbox grew unseen."""
    require_mosquitto()
    broker = Broker(tmp_path / "broker")  # its port chosen, nothing listening there yet
    server = start_service(tmp_path, broker)
    try:
        expected = f"MQTT broker mqtt://127.0.0.1:{broker.port} cannot be reached: nothing listens at 127.0.0.1:"
        deadline = time.monotonic() + 120
        health = server.client.get("/health/ready").json()
        while not any(expected in problem for problem in health["problems"]):
            assert time.monotonic() < deadline, health
            time.sleep(0.2)
            health = server.client.get("/health/ready").json()
        assert health["status"] == "degraded" and "events wait in the outbox" in health["problems"][0]
        while outbox_waiting(server) < 1:
            assert time.monotonic() < deadline, server.log
            time.sleep(0.2)
        assert server.log.count("cannot be reached") == 1  # said once, not at every retry
        broker.start()
        subscriber = Subscriber(broker, [f"{BASE}/events"])
        try:
            subscriber.wait_for(lambda: outbox_waiting(server) == 0, what="the outbox to empty")
            subscriber.wait_for(lambda: subscriber.event_changes(), what="the waiting events")
            assert not server.client.get("/health/ready").json()["problems"]
        finally:
            subscriber.close()
    finally:
        server.stop()
        broker.stop()

    from edge_inference.edge.config import MqttConfig
    from edge_inference.edge.events.mqtt import MqttLink, parse_broker

    config = MqttConfig(device_id=DEVICE)
    link = MqttLink(config, parse_broker("mqtt://edge-no-such-broker.local:1883", config), DEVICE)
    link.start()
    try:
        deadline = time.monotonic() + 120
        while link.last_error is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert link.last_error == (
            "MQTT broker mqtt://edge-no-such-broker.local:1883 cannot be reached: the name edge-no-such-broker.local "
            "does not resolve (.local names need mDNS, which containers and some systems lack: give the IP address): "
            "check the address; events wait in the outbox"
        )
    finally:
        link.stop()


def test_a_wrong_password_is_reported_in_the_brokers_own_words(tmp_path):
    """The broker's refusal ("Not authorized"), not the disconnect that follows it ("Unspecified error")."""
    require_mosquitto()
    secured = Broker(tmp_path / "secured", users={"edge": "right-password"})
    secured.start()
    try:
        from edge_inference.edge.config import MqttConfig
        from edge_inference.edge.events.mqtt import MqttLink, parse_broker

        config = MqttConfig(device_id=DEVICE)
        link = MqttLink(config, parse_broker(f"mqtt://edge:wrong@127.0.0.1:{secured.port}", config), DEVICE)
        link.start()
        try:
            deadline = time.monotonic() + 60
            while "Not authorized" not in (link.last_error or "") and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.5)  # past the disconnect that follows the refusal, and a retry
            assert "refused the connection: Not authorized" in (link.last_error or ""), link.last_error
            assert "wrong" not in (link.last_error or "")
        finally:
            link.stop()
    finally:
        secured.stop()


def test_a_broker_password_with_characters_that_end_the_address_is_refused_with_how_to_write_it(tmp_path):
    require_mosquitto()
    password = "p#ss/w?rd"
    secured = Broker(tmp_path / "secured", users={"edge": password})
    secured.start()
    try:
        from edge_inference.edge.config import ConfigError, MqttConfig
        from edge_inference.edge.events.mqtt import MqttLink, parse_broker

        config = MqttConfig(device_id=DEVICE)
        with pytest.raises(ConfigError) as typed:
            parse_broker(f"mqtt://edge:{password}@127.0.0.1:{secured.port}", config)
        assert str(typed.value) == (
            f"MQTT broker 'mqtt://edge:***@127.0.0.1:{secured.port}': its password holds / ? # as typed, which ends"
            " the address in a URL; write / as %2F, ? as %3F, # as %23, or give it as `password:` in the mqtt block"
        )
        written = parse_broker(f"mqtt://edge:{quote(password, safe='')}@127.0.0.1:{secured.port}", config)
        link = MqttLink(config, written, DEVICE)  # as the message says: the broker gets the password as typed
        link.start()
        try:
            assert link.connected.wait(60), link.last_error
        finally:
            link.stop()
    finally:
        secured.stop()


def test_a_frigate_users_mqtt_block_connects_as_written_there(tmp_path):
    """Frigate's `host`, `port`, `user`, `password` and `enabled` (was: "mqtt.host: not a setting" three times over);
    its password is given as typed, no URL encoding; `enabled: false` is no broker."""
    require_mosquitto()
    from edge_inference.edge.config import load_config
    from edge_inference.edge.events.mqtt import MqttLink, parse_broker

    password = "p#ss/w?rd"
    secured = Broker(tmp_path / "secured", users={"edge": password})
    secured.start()
    try:
        config_file = tmp_path / "config.yml"
        block = {"enabled": True, "host": "127.0.0.1", "port": secured.port, "user": "edge", "password": password}
        config_file.write_text(yaml.safe_dump({"mqtt": block, "streams": [{"id": "a", "source": "0"}]}))
        mqtt = load_config(config_file).mqtt
        assert mqtt is not None and mqtt.url is not None
        link = MqttLink(mqtt, parse_broker(mqtt.url.get_secret_value(), mqtt), DEVICE)
        link.start()
        try:
            assert link.connected.wait(60), link.last_error
        finally:
            link.stop()
        config_file.write_text(
            yaml.safe_dump({"mqtt": {**block, "enabled": False}, "streams": [{"id": "a", "source": 0}]})
        )
        assert load_config(config_file).mqtt is None
    finally:
        secured.stop()


def _started_link(broker, monkeypatch):
    """Our MQTT link to the broker, started, waiting 1 s for a PUBACK (10 s in the service)."""
    from edge_inference.edge.config import MqttConfig
    from edge_inference.edge.events import mqtt as mqtt_module

    monkeypatch.setattr(mqtt_module, "PUBACK_TIMEOUT_S", 1.0)
    config = MqttConfig(device_id=DEVICE)
    link = mqtt_module.MqttLink(config, mqtt_module.parse_broker(broker.url, config), DEVICE)
    link.start()
    return link


def test_a_message_handed_over_as_the_broker_goes_is_sent_once_it_is_back(tmp_path, broker, monkeypatch):
    """The broker goes while the outbox is publishing: the link still counts as connected (paho reports the loss a
    moment later) and paho answers "not connected" while keeping the messages, which it sends itself after
    reconnecting. The outbox must then see them confirmed: before, their handles raised for good and the outbox
    waited on the first of them forever (three minutes of events held back in a full run)."""
    from edge_inference.edge.events.store import Message

    subscriber = Subscriber(broker, ["kept/#"], client_id="kept-consumer")
    link = _started_link(broker, monkeypatch)
    try:
        assert link.connected.wait(60)
        broker.stop()
        deadline = time.monotonic() + 60
        while link.connected.is_set():  # paho has noticed
            assert time.monotonic() < deadline, "the link never saw the broker go"
            time.sleep(0.05)
        link.connected.set()  # the moment before it noticed, as the outbox saw it
        batch = [Message(i, "mqtt", f"kept/{i}", b"%d" % i, False) for i in range(5)]
        assert link.deliver(batch) == 0  # not confirmed: the outbox keeps the rows
        link.connected.clear()
        broker.start()
        assert link.connected.wait(60)
        subscriber.wait_for(lambda: len(subscriber.received()) >= 5, what="the batch, sent by paho on reconnecting")
        assert link.deliver(batch) == 5  # the outbox's next try sees them confirmed, and sends no second copy
        assert link.deliver([Message(99, "mqtt", "kept/end", b"end", False)]) == 1
        subscriber.wait_for(lambda: subscriber.received("kept/end"), what="the sentinel")
    finally:
        link.stop()
        subscriber.close()
    topics = [m.topic for m in subscriber.received() if m.topic != "kept/end"]
    assert sorted(topics) == [f"kept/{i}" for i in range(5)]  # each once


def test_a_message_paho_already_holds_is_not_published_again_by_the_outbox(tmp_path, broker, monkeypatch):
    """The broker stops answering (SIGSTOP) while a batch waits for its PUBACKs: the outbox is told "not confirmed"
    and will hand the same rows over again, while paho keeps them and sends them itself. Each arrives once."""
    from edge_inference.edge.events.store import Message

    subscriber = Subscriber(broker, ["once/#"], client_id="once-consumer")
    link = _started_link(broker, monkeypatch)
    try:
        assert link.connected.wait(60)
        batch = [Message(i, "mqtt", f"once/{i}", b"%d" % i, False) for i in range(5)]
        assert broker.process is not None
        os.kill(broker.process.pid, signal.SIGSTOP)
        try:
            assert link.deliver(batch) == 0  # no PUBACK in time: not confirmed
        finally:
            os.kill(broker.process.pid, signal.SIGCONT)
        subscriber.wait_for(lambda: len(subscriber.received()) >= 5, what="the batch")
        assert link.deliver(batch) == 5  # the outbox's second try: confirmed by paho's own delivery
        assert link.deliver([Message(99, "mqtt", "once/end", b"end", False)]) == 1
        subscriber.wait_for(lambda: subscriber.received("once/end"), what="the sentinel")  # in order: all before it
    finally:
        link.stop()
        subscriber.close()
    topics = [m.topic for m in subscriber.received() if m.topic != "once/end"]
    assert sorted(topics) == [f"once/{i}" for i in range(5)]  # each once


def test_two_devices_with_one_device_id_each_say_so_and_a_restart_is_not_taken_for_one(broker):
    """Two Pis both called raspberrypi: one client id had the broker drop each as the other connected, again and
    again, and their states, Home Assistant entities and last wills were mixed without a word."""
    from edge_inference.edge.config import MqttConfig
    from edge_inference.edge.events.mqtt import MqttLink, parse_broker

    config = MqttConfig(device_id=DEVICE)
    earlier = MqttLink(config, parse_broker(broker.url, config), DEVICE)
    earlier.start()
    assert earlier.connected.wait(60), earlier.last_error
    earlier.stop()  # the last run: its claim stays retained on the broker
    first, second = (MqttLink(config, parse_broker(broker.url, config), DEVICE) for _ in range(2))
    other = MqttLink(MqttConfig(device_id="other-pi"), parse_broker(broker.url, config), "other-pi")
    try:
        for link in (first, other):
            link.start()
            assert link.connected.wait(60), link.last_error
        second.start()
        deadline = time.monotonic() + 60
        while not (first.conflict and second.conflict) and time.monotonic() < deadline:
            time.sleep(0.1)
        # each names the other, not the last run's claim it found on the broker
        assert first.conflicting == second.instance and second.conflicting == first.instance
        assert f"publishes as device edge-inference/{DEVICE} on" in (first.conflict or "")
        assert "give each device its own mqtt.device_id" in (second.conflict or "")
        assert first.connected.is_set() and second.connected.is_set()  # both still connected: their own client ids
        assert other.conflict is None
    finally:
        for link in (first, second, other):
            link.stop()
