"""Events and their outputs for a running service: builders per stream, the recorder, the store, and the sinks
(the broker, and every kind `edge/events/sink.py` finds) as one list.

Built by the stream manager from the config; it listens to the pipelines' results and never slows them: a frame's
listener call is the event bookkeeping (`events.py`) and a comparison of zone counts, nothing that waits.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from edge_inference.edge.config import ServiceConfig, StreamConfig
from edge_inference.edge.events.builder import EventBuilder, EventChange
from edge_inference.edge.events.homeassistant import discovery_messages, removals
from edge_inference.edge.events.mqtt import MqttLink, configured_broker, default_device_id
from edge_inference.edge.events.outbox import OutboxSender
from edge_inference.edge.events.recorder import EventRecorder
from edge_inference.edge.events.sink import EventSink, configured_sinks
from edge_inference.edge.events.storage import StorageWatch, open_store
from edge_inference.edge.events.store import EventStore, StoreBusy, default_data_dir
from edge_inference.edge.settings import Settings
from edge_inference.edge.stream.pipeline import FrameResult, StreamPipeline

log = logging.getLogger("edge.events")
AVAILABILITY_CHECK_S = 1.0


def data_dir(config: ServiceConfig, settings: Settings) -> Path:
    return data_dir_chosen(config, settings)[0]


def data_dir_chosen(config: ServiceConfig, settings: Settings) -> tuple[Path, str]:
    """The data folder and where it came from, by the rule host and port follow: the config file's own setting, then
    the environment (EDGE_DATA_DIR, as the systemd unit and the image set it), then the default. The environment
    used to win here alone, silently, against the file."""
    if config.storage.data_dir is not None:
        ignored = f"; EDGE_DATA_DIR={settings.data_dir} is not used: the config file wins" if settings.data_dir else ""
        return config.storage.data_dir, f"storage.data_dir in the config{ignored}"
    if settings.data_dir is not None:
        return settings.data_dir, "EDGE_DATA_DIR"
    return default_data_dir(), "the default (set storage.data_dir or EDGE_DATA_DIR to move it)"


def mqtt_link(config: ServiceConfig, settings: Settings) -> MqttLink | None:
    """EDGE_MQTT_URL, or the config's mqtt.url; None when neither names a broker."""
    found = configured_broker(config, settings)
    if found is None:
        return None
    mqtt_config, broker = found
    return MqttLink(mqtt_config, broker, mqtt_config.device_id or default_device_id())


def event_sinks(mqtt: MqttLink | None, config: ServiceConfig) -> list[EventSink]:
    """Every destination of event changes: the broker where there is one, then the config's sinks in order."""
    return ([mqtt] if mqtt is not None else []) + configured_sinks(config)


class EventLayer:
    def __init__(self, config: ServiceConfig, settings: Settings) -> None:
        self.config = config
        self._active: dict[tuple[str, str], set[str]] = {}  # (stream, label) -> events going on, for ON/OFF
        self.mqtt = mqtt_link(config, settings)
        self.sinks = event_sinks(self.mqtt, config)
        self.builders: dict[str, EventBuilder] = {
            s.id: EventBuilder(s.id, s.events) for s in config.streams if s.events and not s.compare
        }
        self.store: EventStore | None = None
        self.recorder: EventRecorder | None = None
        self.storage: StorageWatch | None = None
        self._opening_notice: str | None = None  # what opening the store took (a damaged database moved aside)
        self.senders: list[OutboxSender] = []
        self._pipelines: dict[str, StreamPipeline] = {}
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="event-ticker", daemon=True)
        self._data_dir, source = data_dir_chosen(config, settings)
        if self.builders:
            log.info("events are kept in %s (%s)", self._data_dir, source)
            self._open_store(self._data_dir)

    def _open_store(self, folder: Path) -> None:
        opened = open_store(folder, self.config.storage)
        self.store, self._opening_notice = opened.store, opened.notice
        self.storage = StorageWatch(self.store, self.config.storage, opened.problem)
        destinations = [(sink.sink, sink.topic) for sink in self.sinks]
        if self.store is not None:
            for sink in self.sinks:
                self.senders.append(OutboxSender(self.store, sink.sink, sink.deliver))
                sink.when_back(self.senders[-1].wake.set)
        self.recorder = EventRecorder(self.store, destinations, self.storage)
        self.recorder.on_stored += [sender.wake.set for sender in self.senders]
        if self.mqtt is not None:
            self.recorder.listeners.append(self._publish_event_state)
            self.recorder.unstored.append(self._publish_unstored)

    @property
    def storage_notice(self) -> str | None:
        """What keeping the store took: a damaged database moved aside, at start or while serving (the latest)."""
        return (self.store.notice if self.store is not None else None) or self._opening_notice

    @property
    def problem(self) -> str | None:
        """Why events are not being kept now (None when they are, or when none are configured)."""
        return self.storage.problem if self.storage else None

    @property
    def problems(self) -> list[str]:
        """What the user relies on that does not work: events not kept, a sink that cannot take them (the broker
        away or refusing us: Home Assistant hears nothing; the outbox keeps the events), another device publishing
        as this one."""
        conflict = self.mqtt.conflict if self.mqtt is not None else None
        found = [self.problem, *(sink.problem for sink in self.sinks), conflict]
        return [problem for problem in found if problem]

    @property
    def active(self) -> bool:
        return self.recorder is not None or self.mqtt is not None

    # -- wiring --------------------------------------------------------------------------------------------------
    def attach(self, stream: StreamConfig, pipeline: StreamPipeline) -> None:
        self._pipelines[pipeline.stream_id] = pipeline
        builder = self.builders.get(pipeline.stream_id)
        if builder is not None and self.recorder is not None:
            recorder = self.recorder

            def observe(result: FrameResult) -> None:
                changes = builder.observe(
                    result.detections,
                    result.zones,
                    result.lines,
                    result.image,
                    result.timing.captured_at,
                    result.captured_mono or None,  # 0: not known, durations on the wall clock
                    result.held_tracks,
                )
                if changes:
                    recorder.submit(changes)

            pipeline.add_listener(observe)
        if self.mqtt is not None and (stream.zones or stream.lines):
            pipeline.add_listener(self._zone_publisher(pipeline.stream_id))

    def start(self) -> None:
        if self.mqtt is not None:
            streams = [s for s in self.config.streams if s.id in self._pipelines]
            mqtt_config = self.mqtt.config
            if mqtt_config.discovery:
                device = self.mqtt.topics.base.rsplit("/", 1)[-1]
                messages = discovery_messages(self.mqtt.topics, device, streams, mqtt_config.discovery_prefix)
                self.mqtt.set_startup(removals(self._announced(messages), messages) + messages)
            for stream in streams:
                for label in stream.events.labels if stream.events else []:
                    self.mqtt.set_state(self.mqtt.topics.label(stream.id, label), b"OFF")
                    self.mqtt.set_state(self.mqtt.topics.label(stream.id, label, "count"), b"0")
            self.mqtt.start()
        if self.recorder is not None:
            self._end_unfinished()
            self.recorder.start()
        for sender in self.senders:
            sender.start()
        if self.mqtt is not None:
            self._ticker.start()

    def _announced(self, messages: list[tuple[str, bytes]]) -> list[str]:
        """The discovery topics announced by the last run (kept in the data folder), replaced by this run's."""
        record = self._data_dir / "mqtt-discovery.json"
        try:
            previous = json.loads(record.read_text()) if record.exists() else []
        except (OSError, ValueError):
            previous = []
        try:
            self._data_dir.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps([topic for topic, _ in messages]))
        except OSError as exc:
            log.warning("cannot keep the announced Home Assistant entities in %s (%s): stale ones stay", record, exc)
        return [str(topic) for topic in previous] if isinstance(previous, list) else []

    def _end_unfinished(self) -> None:
        """A previous run that was killed left events open: they end when they were last updated, and say so."""
        assert self.recorder is not None
        if self.store is None:
            return
        unfinished = self.store.unfinished()
        if unfinished:
            log.info("ending %d events left open by a previous run", len(unfinished))
        self.recorder.submit([EventChange("end", replace(event, end=updated), None) for event, updated in unfinished])

    def begin_stop(self) -> None:
        """Live listeners (the API's event stream) end now; shutdown must not wait for them."""
        if self.recorder is not None:
            self.recorder.changes.close()

    def stop(self, now: float) -> None:
        """After the streams stopped: events in progress end, everything is stored, then outputs close."""
        if self.recorder is not None:
            for builder in self.builders.values():
                self.recorder.submit(builder.finish(now))
            self.recorder.stop()
        self._stop.set()
        for sender in self.senders:
            sender.stop()
        if self.mqtt is not None:
            for stream_id in self._pipelines:
                self.mqtt.set_state(self.mqtt.topics.stream(stream_id, "availability"), b"offline")
            self.mqtt.stop()
        if self.store is not None:
            self.store.close()

    # -- MQTT state ----------------------------------------------------------------------------------------------
    def _publish_event_state(self, change: EventChange, jpeg: bytes | None) -> None:
        assert self.mqtt is not None
        event = change.event
        active = self._active.setdefault((event.stream, event.label), set())
        if change.kind == "end":
            active.discard(event.id)
        else:
            active.add(event.id)
        on = bool(active)
        topics = self.mqtt.topics
        self.mqtt.set_state(topics.label(event.stream, event.label), b"ON" if on else b"OFF")
        self.mqtt.set_state(topics.label(event.stream, event.label, "count"), str(len(active)).encode())
        attributes = {
            "event_id": event.id,
            "score": round(event.best_score, 3),
            "zones": list(event.zones),
            "snapshot_url": f"/api/v1/events/{event.id}/snapshot.jpg",  # the service's path (404 until it is stored)
            "ongoing": change.kind != "end",
        }
        self.mqtt.set_state(topics.label(event.stream, event.label, "attributes"), json.dumps(attributes).encode())
        if jpeg is not None:
            self.mqtt.set_state(self.mqtt.topics.stream(event.stream, "snapshot"), jpeg)

    def _publish_unstored(self, body: bytes) -> None:
        """A change the store refused goes to the events topic straight away (QoS 1 if connected, else lost)."""
        assert self.mqtt is not None
        self.mqtt.publish(self.mqtt.topics.events, body, qos=1)

    def _zone_publisher(self, stream_id: str) -> Callable[[FrameResult], None]:
        assert self.mqtt is not None
        mqtt = self.mqtt

        def publish(result: FrameResult) -> None:
            for zone in result.zones:
                count = str(sum(zone.objects.values())).encode()
                mqtt.set_state(mqtt.topics.stream(stream_id, "zones", zone.name), count)
            for line in result.lines:
                counts = json.dumps({"in": line.crossed_in, "out": line.crossed_out}).encode()
                mqtt.set_state(mqtt.topics.stream(stream_id, "lines", line.name), counts)

        return publish

    def _tick(self) -> None:
        """Stream availability as it changes; the service's figures every stats_interval_s."""
        assert self.mqtt is not None
        interval = self.mqtt.config.stats_interval_s
        waited = interval
        while not self._stop.wait(AVAILABILITY_CHECK_S):
            for stream_id, pipeline in self._pipelines.items():
                online = pipeline.state in ("running", "ended")
                topic = self.mqtt.topics.stream(stream_id, "availability")
                self.mqtt.set_state(topic, b"online" if online else b"offline")
            waited += AVAILABILITY_CHECK_S
            if waited >= interval:
                waited = 0.0
                try:
                    self.mqtt.publish(self.mqtt.topics.stats, json.dumps(self._stats(), default=str).encode())
                except Exception:
                    log.exception("publishing stats over MQTT failed")

    def _stats(self) -> dict[str, object]:
        streams: dict[str, object] = {}
        for stream_id, pipeline in self._pipelines.items():
            figures = asdict(pipeline.stats.snapshot())
            streams[stream_id] = {"state": pipeline.state, **figures}
        out: dict[str, object] = {"streams": streams}
        outbox = self.outbox_counts()
        if outbox is not None:
            out["outbox"] = outbox
        return out

    def outbox_counts(self) -> dict[str, dict[str, int]] | None:
        """The outbox's counts per destination (MQTT stats, /api/v1/stats); None without a store, or while a
        stalled disk holds it or it is damaged: the figures then go out without its own."""
        if self.store is None:
            return None
        try:
            return self.store.outbox_counts()
        except (StoreBusy, sqlite3.Error):
            return None
