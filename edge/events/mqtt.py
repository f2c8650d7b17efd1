"""The link to an MQTT broker (paho-mqtt): events from the outbox at QoS 1, retained state, availability.

Topics, under `<topic_prefix>/<device_id>` so that many devices share one broker:
  availability                  online / offline (retained; `offline` is the last will, sent by the broker if we die)
  instance                      {"instance", "host", "pid"} of the process publishing as this device (retained): two
                                devices with one device id (two Pis both called raspberrypi) see each other's
  events                        {"type": "start"|"update"|"end", "event": {...}}   QoS 1, from the outbox
  stats                         the service's figures, every stats_interval_s
  <stream>/availability         online while the stream delivers frames (retained)
  <stream>/<label>              ON while an event of that label goes on, else OFF (retained)
  <stream>/zones/<zone>         objects in the zone now (retained)
  <stream>/lines/<line>         {"in": n, "out": n} since start (retained)
  <stream>/snapshot             the latest event's best snapshot, JPEG (retained)
Retained state is kept here and published again on every connection, so a broker that restarts without
persistence, or a consumer that joins late, still gets the current state.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import ssl
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from edge_inference.edge.config import ConfigError, MqttConfig, ServiceConfig
from edge_inference.edge.errors import connection_failure, needs_events_extra
from edge_inference.edge.events.storage import Level
from edge_inference.edge.events.store import Message
from edge_inference.edge.secrets import mask_url, password_encoding_advice
from edge_inference.edge.settings import Settings
from edge_inference.models.labels import label_key

log = logging.getLogger("edge.mqtt")
PUBACK_TIMEOUT_S = 10.0
RECONNECT_MAX_S = 5
NOT_CONNECTED = 4  # paho's MQTT_ERR_NO_CONN: the message is queued and sent once connected


@dataclass(frozen=True)
class Broker:
    host: str
    port: int
    tls: bool
    username: str | None
    password: str | None

    @property
    def description(self) -> str:
        return f"{'mqtts' if self.tls else 'mqtt'}://{self.host}:{self.port}"


def parse_broker(url: str, config: MqttConfig) -> Broker:
    if "://" not in url:
        url = f"mqtt://{url}"  # `192.168.1.5` or `broker.lan:1883`, as Frigate's `host:` and mosquitto_pub -h take it
    advice = password_encoding_advice(url)
    if advice:
        raise ConfigError(f"MQTT broker {mask_url(url)!r}: {advice}, or give it as `password:` in the mqtt block")
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "mqtts", "tcp", "ssl") or not parts.hostname:
        raise ConfigError(
            f"MQTT broker {mask_url(url)!r} is not understood: write mqtt://host:1883 or mqtts://host:8883 (TLS), "
            "with user:password@ before the host when the broker needs them"
        )
    tls = parts.scheme in ("mqtts", "ssl")
    try:
        port = parts.port or (8883 if tls else 1883)
    except ValueError:
        raise ConfigError(f"MQTT broker {mask_url(url)!r} has an invalid port") from None
    password = unquote(parts.password) if parts.password else None
    if password is None and config.password is not None:
        password = config.password.get_secret_value()
    username = unquote(parts.username) if parts.username else config.username
    return Broker(parts.hostname, port, tls, username, password)


def configured_broker(config: ServiceConfig, settings: Settings) -> tuple[MqttConfig, Broker] | None:
    """EDGE_MQTT_URL, or the config's mqtt.url, with the mqtt block; None when neither names a broker."""
    url = settings.mqtt_url or (config.mqtt.url if config.mqtt else None)
    if url is None:
        if config.mqtt is not None:
            raise ConfigError("mqtt: no broker: set mqtt.url, or EDGE_MQTT_URL (mqtt://user:pass@host:1883)")
        return None
    mqtt_config = config.mqtt or MqttConfig()
    return mqtt_config, parse_broker(url.get_secret_value(), mqtt_config)


def default_device_id() -> str:
    name = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
    return name[:64] or "edge"


slug = label_key  # a label as a topic level and a Home Assistant object id: "traffic light" -> traffic_light


class Topics:
    def __init__(self, prefix: str, device_id: str) -> None:
        self.base = f"{prefix.rstrip('/')}/{device_id}"
        self.availability = f"{self.base}/availability"
        self.events = f"{self.base}/events"
        self.stats = f"{self.base}/stats"
        self.instance = f"{self.base}/instance"

    def stream(self, stream_id: str, *parts: str) -> str:
        return "/".join([self.base, stream_id, *parts])

    def label(self, stream_id: str, label: str, *parts: str) -> str:
        """A label's topics: `<stream>/<slug>` (ON/OFF), `.../count`, `.../attributes`."""
        return self.stream(stream_id, slug(label), *parts)


def paho_client(config: MqttConfig, broker: Broker, client_id: str) -> Any:
    """A paho client for the broker, with its user and TLS; not connected."""
    try:
        import paho.mqtt.client as mqtt
    except ImportError as exc:
        raise needs_events_extra("MQTT", exc) from None
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=True)
    if broker.username:
        client.username_pw_set(broker.username, broker.password)
    if broker.tls:
        client.tls_set(ca_certs=str(config.ca_file) if config.ca_file else None, cert_reqs=ssl.CERT_REQUIRED)
    return client


def why_unreachable(error: OSError, broker: Broker, timeout_s: float) -> str:
    host, port = broker.host, broker.port
    if isinstance(error, ssl.SSLError):
        return f"TLS with {host}:{port} failed ({error.reason or error}): check mqtts:// and its port, or ca_file"
    return connection_failure(error, host, port, timeout_s, "the broker runs")


def ask_broker(config: MqttConfig, broker: Broker, timeout_s: float = 5.0) -> tuple[bool, str | None]:
    """(whether it answered, why it did not take this device's user: None when it did). Under a client id of its own,
    with no last will and nothing published: a service running beside the asker keeps its connection (a broker drops
    the older of two clients of one id) and its availability."""
    client = paho_client(config, broker, f"edge-inference-check-{uuid.uuid4().hex[:8]}")
    client.connect_timeout = timeout_s
    answered, reasons = threading.Event(), []

    def connected(_client: object, _userdata: object, _flags: object, reason: object, _props: object) -> None:
        reasons.append(reason)
        answered.set()

    client.on_connect = connected
    try:
        client.connect(broker.host, broker.port, keepalive=60)
    except OSError as exc:
        return False, why_unreachable(exc, broker, timeout_s)
    client.loop_start()
    try:
        if not answered.wait(timeout_s):
            return (
                False,
                f"{broker.host}:{broker.port} took the connection but gave no MQTT answer within {timeout_s:g} s",
            )
        if getattr(reasons[0], "is_failure", False):
            return True, f"it refused the connection: {reasons[0]} (check the user and password)"
        return True, None
    finally:
        client.disconnect()
        client.loop_stop()


class MqttLink:
    """The broker: retained state and Home Assistant's discovery, and one of the event sinks (`edge/events/sink.py`):
    the outbox's messages published on the events topic."""

    sink = name = "mqtt"
    rejected = 0  # a broker takes whatever it is sent

    def __init__(self, config: MqttConfig, broker: Broker, device_id: str) -> None:
        self.config = config
        self.broker = broker
        self.topics = Topics(config.topic_prefix, device_id)
        self.topic = self.topics.events
        self.connected = threading.Event()
        self.on_connect_hooks: list[Callable[[], object]] = []  # run after each connection (outbox wake-up)
        self.last_error: str | None = None
        self.instance = uuid.uuid4().hex[:12]  # this process, as `instance` announces it
        self.conflict: str | None = None  # another process publishing as this device, once one has been seen
        self.conflicting: str | None = None  # the first such process's instance
        self._retained: dict[str, bytes] = {}
        self._startup: list[tuple[str, bytes]] = []  # discovery: published, retained, on every connection
        self._lock = threading.Lock()
        self._stopping = False
        self._refused = False
        self._in_flight: dict[int, Any] = {}  # outbox seq -> paho's handle, until the broker acknowledges it
        # this process's own: two with one id (a copied config, two Pis both called raspberrypi) would have the
        # broker drop each as the other connects, again and again
        self._client = paho_client(
            config, broker, config.client_id or f"edge-inference-{device_id}-{self.instance[:6]}"
        )
        self._client.will_set(self.topics.availability, b"offline", qos=1, retain=True)
        # paho's cap is 120 s: back within 5 s of the broker's return (issue: 30 s was seen)
        self._client.reconnect_delay_set(min_delay=1, max_delay=RECONNECT_MAX_S)
        self._client.on_connect = self._connected
        self._client.on_connect_fail = self._connect_failed
        self._client.on_disconnect = self._disconnected
        self._client.message_callback_add(self.topics.instance, self._claimed)

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._client.connect_async(self.broker.host, self.broker.port, keepalive=self.config.keepalive_s)
        self._client.loop_start()

    def stop(self) -> None:
        """Say `offline` ourselves (a clean stop sends no last will), then disconnect."""
        self._stopping = True
        if self.connected.is_set():
            info = self._client.publish(self.topics.availability, b"offline", qos=1, retain=True)
            info.wait_for_publish(2.0) if info.rc == 0 else None
        self._client.disconnect()
        self._client.loop_stop()

    # -- as an event sink ------------------------------------------------------------------------------------
    @property
    def problem(self) -> str | None:
        """The broker away or refusing us: Home Assistant hears nothing (the outbox keeps the events)."""
        return self.last_error if not self.connected.is_set() else None

    def when_back(self, wake: Callable[[], None]) -> None:
        self.on_connect_hooks.append(wake)

    def check(self) -> tuple[str, Level]:
        """A broker that is down may come back (a warning: events wait); one that refuses this user never will."""
        broker, user = self.broker.description, self.broker.username
        answered, why = ask_broker(self.config, self.broker)
        if why is None:
            return (f"{broker} logs in user {user}" if user else f"{broker} takes clients with no user"), "ok"
        if answered:
            return f"{broker}: {why}; no event would reach it", "problem"
        return f"{broker}: {why}; events would wait in the outbox", "warning"

    def set_startup(self, messages: list[tuple[str, bytes]]) -> None:
        self._startup = messages

    def _connected(self, client: object, userdata: object, flags: object, reason: object, props: object) -> None:
        if getattr(reason, "is_failure", False):
            self._refused = True  # the disconnect that follows says only "Unspecified error": keep the broker's word
            self._note(f"MQTT broker {self.broker.description} refused the connection: {reason}")
            return
        self._refused = False
        log.info("MQTT: connected to %s as %s", self.broker.description, self.topics.base)
        self.last_error = None
        self._client.publish(self.topics.availability, b"online", qos=1, retain=True)
        # ours replaces the last run's before we listen: any other claim that reaches us then is a live process's
        self._client.publish(self.topics.instance, self._claim(reply=False), qos=1, retain=True)
        self._client.subscribe(self.topics.instance, qos=1)
        for topic, payload in self._startup:
            self._client.publish(topic, payload, qos=1, retain=True)
        with self._lock:
            retained = dict(self._retained)
        for topic, payload in retained.items():
            self._client.publish(topic, payload, qos=1, retain=True)
        self.connected.set()
        for hook in self.on_connect_hooks:
            hook()

    def _disconnected(self, client: object, userdata: object, flags: object, reason: object, props: object) -> None:
        self.connected.clear()
        if self._stopping:
            log.info("MQTT: disconnected from %s", self.broker.description)
            return
        if self._refused:
            return
        self._note(f"MQTT broker {self.broker.description} is unreachable ({reason}); events wait in the outbox")

    def _connect_failed(self, client: object, userdata: object) -> None:
        """The first connection, or a retry after a loss, failed at the socket. No on_disconnect follows, so a broker
        down at start or a name that does not resolve went unsaid: health ok, the outbox growing. paho calls this
        inside its `except OSError`, so the error is at hand."""
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):
            return
        why = why_unreachable(error, self.broker, self._client.connect_timeout)
        self._note(f"MQTT broker {self.broker.description} cannot be reached: {why}; events wait in the outbox")

    def _claim(self, reply: bool) -> bytes:
        claim = {"instance": self.instance, "host": socket.gethostname(), "pid": os.getpid(), "reply": reply}
        return json.dumps(claim).encode()

    def _claimed(self, client: object, userdata: object, message: Any) -> None:
        """A claim on this device's topics: ours, or another process's (answered once, so that it knows too)."""
        try:
            claim = json.loads(message.payload)
        except ValueError:
            return
        if not isinstance(claim, dict) or claim.get("instance") in (None, self.instance):
            return
        host, pid = (re.sub(r"[^\w.:-]", "?", str(claim.get(key)))[:64] for key in ("host", "pid"))  # no log injection
        who = f"on {host}, process {pid}"
        conflict = (
            f"MQTT: another edge-inference ({who}) publishes as device {self.topics.base} on {self.broker.description}:"
            " the two mix their states, Home Assistant entities and last will; give each device its own mqtt.device_id"
        )
        if conflict != self.conflict:
            log.error("%s", conflict)
        self.conflict = conflict
        self.conflicting = self.conflicting or str(claim["instance"])
        if not claim.get("reply"):
            self._client.publish(self.topics.instance, self._claim(reply=True), qos=1, retain=False)

    def _note(self, error: str) -> None:
        if error != self.last_error:
            log.warning("%s", error)
        self.last_error = error

    # -- publishing ------------------------------------------------------------------------------------------
    def set_state(self, topic: str, payload: bytes) -> None:
        """Retained state: published now when connected, and again after every reconnection."""
        with self._lock:
            if self._retained.get(topic) == payload:
                return
            self._retained[topic] = payload
        if self.connected.is_set():
            self._client.publish(topic, payload, qos=1, retain=True)

    def publish(self, topic: str, payload: bytes, qos: int = 0) -> None:
        """What is only worth sending now (stats, an event the store refused): lost while the broker is away."""
        if self.connected.is_set():
            self._client.publish(topic, payload, qos=qos, retain=False)

    def deliver(self, messages: list[Message]) -> int:
        """The outbox's destination: publish in order at QoS 1; count the messages the broker acknowledged.

        A message handed to paho and not yet acknowledged is never published again: paho itself sends its
        unacknowledged QoS 1 messages again when it reconnects, so publishing the outbox's copy too would deliver
        every such message twice after each outage. Its pending handle is waited on instead."""
        if not self.connected.is_set():
            return 0
        head = messages[0].seq if messages else None
        for seq in [s for s in self._in_flight if head is not None and s < head]:  # rows gone from the outbox
            del self._in_flight[seq]
        handles = []
        for message in messages:
            info = self._in_flight.get(message.seq)
            if info is None:
                info = self._client.publish(message.topic, message.payload, qos=1, retain=message.retain)
                if info.rc == NOT_CONNECTED:
                    # The broker went a moment before paho said so: paho keeps the message and sends it when it
                    # reconnects, but its handle keeps this code, on which waiting raises for good (paho 2.2).
                    # Marked as paho marks a message it queues for later, so waiting on it sees the PUBACK.
                    info.rc = type(info.rc).MQTT_ERR_SUCCESS
                if info.rc != 0:
                    break
                self._in_flight[message.seq] = info
            handles.append(info)
        done = 0
        for info in handles:
            try:
                info.wait_for_publish(PUBACK_TIMEOUT_S)
            except RuntimeError:  # disconnected meanwhile: paho resends it after reconnecting
                break
            if not info.is_published():
                break
            done += 1
        for message in messages[:done]:
            self._in_flight.pop(message.seq, None)
        return done
