"""Home Assistant MQTT discovery for every label the service can watch: topics Home Assistant accepts, the human
names kept, the origin block, event details as attributes, a count per label, and entities removed when they leave
the config. (Home Assistant itself needs Python 3.13, so its discovery pattern is copied here from its source.)"""

from __future__ import annotations

import json
import re

from edge_inference.edge.config import ServiceConfig
from edge_inference.edge.events.homeassistant import discovery_messages, removals
from edge_inference.edge.events.layer import EventLayer
from edge_inference.edge.events.mqtt import Topics, slug
from edge_inference.edge.settings import Settings
from edge_inference.models.labels import COCO80

# homeassistant/components/mqtt/discovery.py (2025.x): the discovery topics Home Assistant reads; others are ignored
TOPIC_MATCHER = re.compile(r"(?P<component>\w+)/(?:(?P<node_id>[a-zA-Z0-9_-]+)/)?(?P<object_id>[a-zA-Z0-9_-]+)/config")
TOPIC_LEVEL = re.compile(r"^[^+#\s]+$")  # a published topic: no wildcards, and no spaces that a user would trip on


def config(labels: list[str], zones: tuple[str, ...] = ("door",), lines: tuple[str, ...] = ("gate",)) -> ServiceConfig:
    stream = {
        "id": "front-yard",
        "source": "x.mp4",
        "events": {"labels": labels},
        "zones": [{"name": z, "polygon": [[0, 0], [1, 0], [1, 1]]} for z in zones],
        "lines": [{"name": n, "start": [0, 0.5], "end": [1, 0.5]} for n in lines],
    }
    return ServiceConfig.model_validate({"streams": [stream], "mqtt": {"url": "mqtt://127.0.0.1:9", "device_id": "pi"}})


def test_every_discovery_topic_for_every_coco_label_is_one_home_assistant_accepts():
    service = config(list(COCO80))
    topics = Topics("edge-inference", "pi")
    messages = discovery_messages(topics, "pi", service.streams)
    prefix = "homeassistant/"
    for topic, payload in messages:
        assert TOPIC_MATCHER.fullmatch(topic.removeprefix(prefix)), topic
        body = json.loads(payload)
        assert body["origin"]["name"] == "edge-inference" and body["origin"]["sw_version"]
        for key in ("state_topic", "json_attributes_topic", "image_topic"):
            if key in body:
                assert TOPIC_LEVEL.match(body[key]), body[key]
    by_name = {json.loads(p)["name"]: json.loads(p) for _, p in messages}
    light = by_name["front-yard traffic light detected"]  # the human name kept
    assert light["state_topic"] == "edge-inference/pi/front-yard/traffic_light"
    assert light["json_attributes_topic"] == "edge-inference/pi/front-yard/traffic_light/attributes"
    assert by_name["front-yard traffic light count"]["state_topic"].endswith("/traffic_light/count")
    assert len(messages) == len({t for t, _ in messages}) == 2 * 80 + 1 + 2 + 1  # labels x2, zone, line in/out, image
    assert slug("cell phone") == "cell_phone" and slug("hot dog") == "hot_dog" and slug("Teddy Bear!") == "teddy_bear"
    # a model's own labels in other scripts: one topic each (every one of these was "unnamed")
    assert [slug(name) for name in ("Fußgänger", "café", "狗", "猫", "собака")] == [
        "fussganger",
        "cafe",
        "u72d7",
        "u732b",
        "u0441_u043e_u0431_u0430_u043a_u0430",
    ]


def test_entities_that_leave_the_config_are_removed_with_an_empty_retained_config(tmp_path):
    settings = Settings(data_dir=tmp_path)
    before = config(["person", "car"], zones=("door", "drive"))
    first = EventLayer(before, settings)
    old = discovery_messages(first.mqtt.topics, "pi", before.streams)
    assert first._announced(old) == []  # nothing announced before the first run
    after = config(["person"], zones=("door",))
    second = EventLayer(after, settings)
    new = discovery_messages(second.mqtt.topics, "pi", after.streams)
    gone = removals(second._announced(new), new)
    assert {topic.split("/")[2] for topic, _ in gone} == {
        "pi_front_yard_car_detected",
        "pi_front_yard_car_count",
        "pi_front_yard_drive_count",
    }
    assert all(payload == b"" for _, payload in gone)
    assert removals(second._announced(new), new) == []  # the next run has nothing left to remove
