"""A real Mosquitto broker (Debian's `mosquitto`) on a free loopback port, and a subscriber that keeps its session."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.server import free_port

MOSQUITTO = shutil.which("mosquitto") or next(
    (p for p in ("/usr/sbin/mosquitto", "/usr/bin/mosquitto") if Path(p).exists()), None
)


def require_mosquitto() -> str:
    if MOSQUITTO is None:
        if os.environ.get("CI"):
            raise RuntimeError("CI needs Debian's mosquitto for the MQTT tests: apt-get install mosquitto")
        pytest.skip("Debian's mosquitto is not installed (apt-get install mosquitto)")
    return MOSQUITTO


class Broker:
    """Persistent (queued QoS 1 messages survive a restart, as on a real install), stopped by its own pid."""

    def __init__(self, folder: Path, users: dict[str, str] | None = None) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"mqtt://127.0.0.1:{self.port}"
        folder.mkdir(parents=True, exist_ok=True)
        self.config = folder / "mosquitto.conf"
        access = "allow_anonymous true\n"
        if users:  # a password file made by mosquitto_passwd, as a secured broker has
            passwords = folder / "passwords"
            passwords.write_text("")
            for user, password in users.items():
                subprocess.run(["mosquitto_passwd", "-b", str(passwords), user, password], check=True)
            passwords.chmod(0o600)
            access = f"allow_anonymous false\npassword_file {passwords}\n"
        self.config.write_text(
            f"listener {self.port} 127.0.0.1\n{access}persistence true\n"
            f"persistence_location {folder}/\nautosave_interval 1\nmax_queued_messages 100000\n"
            # as root it would switch to the `mosquitto` user, who cannot write the test's private folder
            + ("user root\n" if os.geteuid() == 0 else "")
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.folder / "mosquitto.log").open("ab")
        self.process = subprocess.Popen([require_mosquitto(), "-c", str(self.config)], stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert self.process.poll() is None, (self.folder / "mosquitto.log").read_text()
                assert time.monotonic() < deadline, "mosquitto did not listen within 30 s"
                time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM: Mosquitto writes its persistence file and exits."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            self.process.wait(30)
        self.process = None


@dataclass
class Received:
    topic: str
    payload: bytes
    retain: bool

    def json(self) -> dict:
        return json.loads(self.payload)


class Subscriber:
    """A consumer with a fixed client id and clean_session=False: the broker queues its QoS 1 messages."""

    def __init__(self, broker: Broker, topics: list[str], client_id: str = "test-consumer") -> None:
        import paho.mqtt.client as mqtt

        self.messages: list[Received] = []
        self._lock = threading.Lock()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=False)
        self.client.on_message = lambda _c, _u, m: self._add(Received(m.topic, bytes(m.payload), bool(m.retain)))
        self.topics = topics
        # Connected is not subscribed: a message routed before the broker has taken the SUBSCRIBE is not queued for
        # this consumer (a test that stopped the broker right after connecting lost its batch that way).
        self.subscribed = threading.Event()
        self.client.on_connect = self._subscribe
        self.client.on_subscribe = lambda *_: self.subscribed.set()
        self.client.reconnect_delay_set(min_delay=1, max_delay=2)
        self.client.connect_async("127.0.0.1", broker.port, keepalive=10)
        self.client.loop_start()
        assert self.subscribed.wait(120), f"the broker did not confirm the subscription to {topics} within 120 s"

    def _subscribe(self, client: Any, *_: Any) -> None:
        client.subscribe([(topic, 1) for topic in self.topics])

    def _add(self, message: Received) -> None:
        with self._lock:
            self.messages.append(message)

    def received(self, topic_suffix: str = "") -> list[Received]:
        with self._lock:
            return [m for m in self.messages if m.topic.endswith(topic_suffix)]

    def event_changes(self) -> list[dict]:
        return [m.json() for m in self.received("/events")]

    def wait_for(self, condition: Callable[[], object], timeout: float = 180, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.1)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()
