"""Event destinations are one list (issue 82): a new sink is one module with its own config model, installed as a
plugin distribution is, and the layer, health, the stats and `serve --check` take it with no other file changed."""

from __future__ import annotations

import json
import time

import pytest

from edge_inference.edge.config import ConfigError, ServiceConfig
from edge_inference.edge.events.builder import EventBuilder, EventChange
from edge_inference.edge.events.layer import EventLayer
from edge_inference.edge.events.sink import sink_kinds
from edge_inference.edge.runtime.check import Finding, destination_findings
from edge_inference.edge.settings import Settings
from tests.test_events import IMAGE, person

# A sink as a third party would write it: its settings model, a class keeping what it is sent, its declaration.
LIST_SINK = """
from pydantic import BaseModel, ConfigDict

from edge_inference.edge.events.sink import SinkKind

RECEIVED = []


class ListOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    down_for: int = 0  # deliveries refused before it takes messages


class ListSink:
    topic = "event"
    rejected = 0

    def __init__(self, options, index):
        self.sink, self.name, self.options = f"list:{index}", f"list {index}", options
        self.down_for, self.last_error = options.down_for, None

    def deliver(self, messages):
        if self.down_for:
            self.down_for -= 1
            self.last_error = f"list {self.options.name} is down"
            return 0
        self.last_error = None
        RECEIVED.extend((self.options.name, m.payload) for m in messages)
        return len(messages)

    @property
    def problem(self):
        return self.last_error

    def check(self):
        return f"list {self.options.name} would take events", "ok"

    def when_back(self, wake):
        pass


SINK = SinkKind("list", ListOptions, ListSink)
"""


@pytest.fixture
def list_sink(tmp_path, monkeypatch):
    """The module above installed with its entry point in the `edge_inference.sinks` group, as pip would."""
    site = tmp_path / "site"
    dist = site / "list_sink-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / "list_sink.py").write_text(LIST_SINK)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: list-sink\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[edge_inference.sinks]\nlist = list_sink:SINK\n")
    monkeypatch.syspath_prepend(str(site))
    sink_kinds.cache_clear()
    import list_sink

    yield list_sink
    sink_kinds.cache_clear()


def _config(tmp_path, sinks: list[dict[str, object]], webhooks: list[dict[str, object]] | None = None) -> ServiceConfig:
    return ServiceConfig.model_validate(
        {
            "streams": [{"id": "cam", "source": "cam.mp4", "events": {"labels": ["person"], "min_frames": 1}}],
            "storage": {"data_dir": str(tmp_path / "data")},
            "sinks": sinks,
            "webhooks": webhooks or [],
        }
    )


def _changes() -> list[EventChange]:
    """An event's start and its end."""
    builder = EventBuilder("cam", _config_events())
    return builder.observe([person(1)], (), (), IMAGE, 1000.0) + builder.finish(1001.0)


def _config_events():
    from edge_inference.edge.config import EventsConfig

    return EventsConfig(labels=["person"], min_frames=1)


def _until(condition, what) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, what()
        time.sleep(0.05)


def test_a_sink_installed_as_one_module_gets_every_change_in_order_after_an_outage(tmp_path, list_sink):
    sinks: list[dict[str, object]] = [{"type": "list", "name": "a", "down_for": 2}, {"type": "list", "name": "b"}]
    layer = EventLayer(_config(tmp_path, sinks), Settings(data_dir=tmp_path))
    assert [sink.sink for sink in layer.sinks] == ["list:0", "list:1"]
    layer.start()
    try:
        assert layer.recorder is not None
        layer.recorder.submit(_changes())
        _until(lambda: len(list_sink.RECEIVED) == 4, lambda: (list_sink.RECEIVED, layer.problems))
        assert not layer.problems  # its outage was said in health (the next test), and cleared once it took them
    finally:
        layer.stop(time.time())
    got = {name: [json.loads(payload)["type"] for n, payload in list_sink.RECEIVED if n == name] for name in "ab"}
    assert got == {"a": ["start", "end"], "b": ["start", "end"]}  # each sink every change, in order


def test_the_outage_of_a_sink_is_in_health_while_it_lasts(tmp_path, list_sink):
    layer = EventLayer(
        _config(tmp_path, [{"type": "list", "name": "a", "down_for": 10**6}]), Settings(data_dir=tmp_path)
    )
    layer.start()
    try:
        assert layer.recorder is not None
        layer.recorder.submit(_changes())
        _until(lambda: "list a is down" in layer.problems, lambda: layer.problems)
        assert layer.outbox_counts() == {"list:0": {"waiting": 2, "dropped": 0}}  # kept for when it is back
    finally:
        layer.stop(time.time())


def test_serve_check_asks_each_sink(tmp_path, list_sink):
    config = _config(tmp_path, [{"type": "list", "name": "a"}, {"type": "list", "name": "b"}])
    findings = destination_findings(config, Settings(data_dir=tmp_path))
    assert findings[1:] == [
        Finding("list 0", "list a would take events"),
        Finding("list 1", "list b would take events"),
    ]


def test_the_older_webhooks_key_is_a_webhook_sink_before_the_others(tmp_path, list_sink):
    config = _config(tmp_path, [{"type": "webhook", "url": "http://127.0.0.1:9/b"}], [{"url": "http://127.0.0.1:9/a"}])
    sinks = EventLayer(config, Settings(data_dir=tmp_path)).sinks
    assert [(sink.sink, sink.name) for sink in sinks] == [("webhook:0", "webhook 0"), ("webhook:1", "webhook 1")]


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ({"type": "lsit", "name": "a"}, "sinks[0]: no sink is of type 'lsit': choose from list, webhook"),
        ({"type": "list"}, "sinks[0] (list): name: Field required"),
        ({"type": "list", "name": "a", "colour": 1}, "sinks[0] (list): colour: Extra inputs are not permitted"),
        ({"type": "webhook", "url": "ftp://x"}, "sinks[0] (webhook): url: Value error, a webhook URL starts with"),
    ],
)
def test_a_wrong_sink_is_one_line_naming_the_entry(tmp_path, list_sink, entry, said):
    with pytest.raises(ConfigError) as raised:
        EventLayer(_config(tmp_path, [entry]), Settings(data_dir=tmp_path))
    assert str(raised.value).startswith(said) and "\n" not in str(raised.value)
    findings = destination_findings(_config(tmp_path, [entry]), Settings(data_dir=tmp_path))
    assert Finding("sinks", str(raised.value), "problem") in findings


def test_the_layer_and_the_check_name_no_kind_of_sink():
    """What a new sink would have to touch: nothing outside its module (the broker is more than a sink: it also
    carries Home Assistant's state, so the layer knows it as that)."""
    import io
    import tokenize
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    for path in ("edge/events/layer.py", "edge/runtime/check.py", "edge/runtime/snapshots.py"):
        tokens = tokenize.generate_tokens(io.StringIO((repo / path).read_text()).readline)
        names = {token.string.lower() for token in tokens if token.type == tokenize.NAME}
        assert not {name for name in names if "webhook" in name}, path
