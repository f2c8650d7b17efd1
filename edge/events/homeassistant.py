"""Home Assistant MQTT discovery: the device's entities announced on `<discovery_prefix>/<component>/.../config`.

Follows https://www.home-assistant.io/integrations/mqtt/#mqtt-discovery: one retained JSON config per entity, each
with a `unique_id`, the shared `device` block (so they are grouped under one device), and availability from both the
device's last will and the stream's own state (`availability_mode: all`), and the `origin` block HA recommends.
Labels appear in topics and object ids as slugs ("traffic light" -> traffic_light; HA's discovery TOPIC_MATCHER
takes [a-zA-Z0-9_-] only) and by their own name in `name`. Per stream:
  binary_sensor  "<stream> <label> detected" for each watched label (ON while an event of that label goes on), with
                 the latest event's details as attributes (score, zones, event id, snapshot URL)
  sensor         "<stream> <label> count" for each watched label (events of it going on now, as Frigate's count)
  sensor         "<stream> <zone> count" for each zone (objects in it now)
  sensor         "<stream> <line> in" / "out" for each line (crossings since start, total_increasing)
  image          "<stream> last event", the latest event's best snapshot (JPEG on the snapshot topic)
"""

from __future__ import annotations

import json

from edge_inference import __version__
from edge_inference.edge.config import StreamConfig
from edge_inference.edge.events.mqtt import Topics, slug

ORIGIN = {"name": "edge-inference", "sw_version": __version__}


def _device(device_id: str) -> dict[str, object]:
    return {
        "identifiers": [f"edge-inference-{device_id}"],
        "name": f"Edge inference {device_id}",
        "manufacturer": "edge-inference",
        "model": "object detection service",
        "sw_version": __version__,
    }


def discovery_messages(
    topics: Topics, device_id: str, streams: list[StreamConfig], prefix: str = "homeassistant"
) -> list[tuple[str, bytes]]:
    device = _device(device_id)
    messages: list[tuple[str, bytes]] = []

    def add(component: str, stream: StreamConfig, key: str, config: dict[str, object]) -> None:
        object_id = f"{device_id}_{stream.id}_{key}".replace("-", "_")
        payload = {
            "unique_id": f"edge_inference_{object_id}",
            "device": device,
            "availability": [
                {"topic": topics.availability},
                {"topic": topics.stream(stream.id, "availability")},
            ],
            "availability_mode": "all",
            "origin": ORIGIN,
            **config,
        }
        messages.append((f"{prefix}/{component}/{object_id}/config", json.dumps(payload).encode()))

    for stream in streams:
        for label in stream.events.labels if stream.events else []:
            add(
                "binary_sensor",
                stream,
                f"{slug(label)}_detected",
                {
                    "name": f"{stream.id} {label} detected",
                    "state_topic": topics.label(stream.id, label),
                    "json_attributes_topic": topics.label(stream.id, label, "attributes"),
                    "payload_on": "ON",
                    "payload_off": "OFF",
                    "device_class": "occupancy",
                },
            )
            add(
                "sensor",
                stream,
                f"{slug(label)}_count",
                {
                    "name": f"{stream.id} {label} count",
                    "state_topic": topics.label(stream.id, label, "count"),
                    "state_class": "measurement",
                    "unit_of_measurement": "objects",
                },
            )
        for zone in stream.zones:
            add(
                "sensor",
                stream,
                f"{zone.name}_count",
                {
                    "name": f"{stream.id} {zone.name} count",
                    "state_topic": topics.stream(stream.id, "zones", zone.name),
                    "state_class": "measurement",
                    "unit_of_measurement": "objects",
                },
            )
        for line in stream.lines:
            for direction in ("in", "out"):
                add(
                    "sensor",
                    stream,
                    f"{line.name}_{direction}",
                    {
                        "name": f"{stream.id} {line.name} {direction}",
                        "state_topic": topics.stream(stream.id, "lines", line.name),
                        "value_template": f"{{{{ value_json.{direction} }}}}",
                        "state_class": "total_increasing",
                    },
                )
        if stream.events:
            add(
                "image",
                stream,
                "last_event",
                {
                    "name": f"{stream.id} last event",
                    "image_topic": topics.stream(stream.id, "snapshot"),
                    "content_type": "image/jpeg",
                },
            )
    return messages


def removals(previous: list[str], messages: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """An empty retained config for each entity announced before and not now (a stream, zone, line or label that
    left the config): Home Assistant removes the entity, and the broker forgets the old config."""
    current = {topic for topic, _ in messages}
    return [(topic, b"") for topic in previous if topic not in current]
