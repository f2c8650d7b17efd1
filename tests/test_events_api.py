"""The events API on a real server: list, filter and page, one event, its snapshot, the live SSE stream, counters."""

from __future__ import annotations

import base64
import time
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import cv2
import numpy as np
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from edge_inference.edge.config import ServiceConfig
from tests.conftest import REPO, VTEST
from tests.inprocess import SSD_ONNX, app_client, service_config
from tests.server import running_server, sse_data


def events_config(tmp_path) -> str:
    config = yaml.safe_load((REPO / "deploy/events.example.yaml").read_text())
    del config["mqtt"]  # events without a broker: the API alone
    config["storage"] = {"data_dir": str(tmp_path / "data")}
    stream = config["streams"][0]
    stream["source"] = str(VTEST)
    stream["events"]["end_after_s"] = 1
    path = tmp_path / "events.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.mark.process
def test_events_are_listed_filtered_paged_and_shown_with_their_snapshots(tmp_path):
    kolkata = {"TZ": "Asia/Kolkata"}  # the service's local time, +05:30: a time with no zone is read in it
    with running_server(["--config", events_config(tmp_path)], tmp_path / "serve.log", env=kolkata) as server:
        server.wait_until("/health/ready", timeout=180)
        live = sse_data(server.client, "/api/v1/events/stream", "event", 4, timeout=180)
        assert live[0]["type"] in ("start", "update", "end") and live[0]["event"]["label"] == "person"
        deadline = time.monotonic() + 180
        while len(server.client.get("/api/v1/events", params={"limit": 500}).json()["events"]) < 6:
            assert time.monotonic() < deadline, server.log
            time.sleep(0.5)

        everything = server.client.get("/api/v1/events", params={"limit": 500}).json()["events"]
        starts = [e["start"] for e in everything]
        assert starts == sorted(starts, reverse=True)  # newest first
        pages, cursor = [], None
        while True:
            params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            page = server.client.get("/api/v1/events", params=params).json()
            pages += [e["id"] for e in page["events"]]
            cursor = page["next"]
            if cursor is None:
                break
        known = {e["id"] for e in everything}
        assert set(pages) >= known and len(pages) == len(set(pages))  # every event once (new ones may join)
        assert server.client.get("/api/v1/events", params={"label": "car"}).json()["events"] == []
        middle = starts[len(starts) // 2]
        later = server.client.get("/api/v1/events", params={"after": middle, "limit": 500}).json()["events"]
        assert later and all(e["start"] >= middle for e in later)
        # as people and scripts write a time: ISO 8601 with its zone, or without one (the service's local time)
        utc = datetime.fromtimestamp(middle, timezone.utc).isoformat().replace("+00:00", "Z")
        local = datetime.fromtimestamp(middle, ZoneInfo("Asia/Kolkata")).replace(tzinfo=None).isoformat()
        for given in (utc, local):
            same = server.client.get("/api/v1/events", params={"after": given, "limit": 500}).json()["events"]
            assert {e["id"] for e in same} >= {e["id"] for e in later}, given  # new events may have joined
            assert all(e["start"] >= middle for e in same), given
        for given in ("yesterday", "nan", "24/11/2026"):
            answer = server.client.get("/api/v1/events", params={"after": given})
            (problem,) = answer.json()["detail"]
            assert answer.status_code == 422 and problem["loc"] == ["query", "after"], answer.text
            assert problem["msg"].startswith("not a time: give seconds since the epoch"), problem

        event = everything[-1]
        one = server.client.get(f"/api/v1/events/{event['id']}").json()
        assert one["id"] == event["id"] and one["track_id"] == event["track_id"] and one["has_snapshot"]
        snapshot = server.client.get(f"/api/v1/events/{event['id']}/snapshot.jpg")
        assert snapshot.headers["content-type"] == "image/jpeg"
        image = cv2.imdecode(np.frombuffer(snapshot.content, np.uint8), cv2.IMREAD_COLOR)
        assert image is not None and image.shape[:2] == (576, 768)
        missing = server.client.get("/api/v1/events/no-such-event")
        assert missing.status_code == 404 and "no event" in missing.json()["detail"]
        bad = server.client.get("/api/v1/events", params={"cursor": "not-a-cursor"})
        # thousands of nested '[' made json.loads raise RecursionError, which escaped as a 500 with a traceback
        nested = base64.urlsafe_b64encode(b"[" * 5000).decode()
        deep = server.client.get("/api/v1/events", params={"cursor": nested})
        for answer in (bad, deep):  # FastAPI's own 422 shape, with the `type` its published schema requires
            (problem,) = answer.json()["detail"]
            assert answer.status_code == 422 and problem["loc"] == ["query", "cursor"] and problem["type"]
        assert "Traceback" not in server.log and "RecursionError" not in server.log

        stats = server.client.get("/api/v1/stats").json()
        walkway = stats["streams"]["walkway"]
        assert set(walkway["zones"]) == {"crossing"} and set(walkway["lines"]) == {"path"}
        assert stats["events"]["recorded"] >= 6 and stats["events"]["mqtt_connected"] is None
        families = {f.name: f for f in text_string_to_metric_families(server.client.get("/metrics").text)}
        assert families["edge_event_changes_recorded"].samples[0].value >= 6
        crossings = {s.labels["direction"] for s in families["edge_line_crossings"].samples}
        assert crossings == {"in", "out"}
        assert "edge_zone_longest_dwell_seconds" in families

        video = server.client.get("/api/v1/streams/walkway/snapshot.jpg", params={"zones": "true"})
        plain = server.client.get("/api/v1/streams/walkway/snapshot.jpg", params={"boxes": "false"})
        assert video.status_code == plain.status_code == 200 and video.content != plain.content


def test_without_events_configured_the_events_routes_say_how_to_configure_them():
    with app_client(service_config()) as client:
        for path in ("/api/v1/events", "/api/v1/events/x", "/api/v1/events/x/snapshot.jpg", "/api/v1/events/stream"):
            answer = client.get(path)
            assert answer.status_code == 404 and "events are not configured" in answer.json()["detail"], path
        assert "events" in client.get("/api/v1/stats").json()
        assert client.get("/api/v1/stats").json()["events"] is None


def test_a_label_the_model_does_not_detect_is_reported_and_one_in_another_case_makes_events(tmp_path):
    """A typo in `events.labels` kept events from ever firing without a word; "Person" did the same."""
    streams = [
        {"id": "hall", "source": str(VTEST), "loop": True, "events": {"labels": ["Person"], "min_frames": 2}},
        {"id": "yard", "source": str(VTEST), "loop": True, "events": {"labels": ["persons"]}},
    ]
    config = ServiceConfig.model_validate(
        {"streams": [{"model": SSD_ONNX, **s} for s in streams], "storage": {"data_dir": str(tmp_path / "data")}}
    )
    with app_client(config) as client:
        deadline = time.monotonic() + 180
        while not client.get("/api/v1/events", params={"stream": "hall"}).json()["events"]:
            assert time.monotonic() < deadline, client.get("/health/ready").json()
            time.sleep(0.2)
        assert client.get("/api/v1/events", params={"stream": "hall"}).json()["events"][0]["label"] == "person"
        # filtered as the config names labels: in any case
        assert client.get("/api/v1/events", params={"stream": "hall", "label": "Person"}).json()["events"]
        assert not client.get("/api/v1/events", params={"stream": "hall", "label": "persons"}).json()["events"]
        health = client.get("/health/ready")
        (problem,) = health.json()["problems"]
        assert health.status_code == 200 and health.json()["status"] == "degraded"
        assert problem.startswith("stream yard: events.labels names 'persons' (did you mean 'person'?)")
        assert client.get("/api/v1/events", params={"stream": "yard"}).json()["events"] == []


def test_a_zone_that_does_not_fit_the_frame_is_in_health_until_fixed():
    """Zone pixels from a 1920x1080 snapshot on the 768x576 video: nobody can ever stand in it."""
    zones = [{"name": "door", "polygon": [[1500, 700], [1900, 700], [1900, 1070], [1500, 1070]]}]
    config = service_config(tracking={}, zones=zones)
    with app_client(config) as client:
        deadline = time.monotonic() + 180
        while not (health := client.get("/health/ready").json())["problems"]:
            assert time.monotonic() < deadline, health
            time.sleep(0.1)
        assert health["status"] == "degraded" and health["problems"] == [
            "stream main: zone door has the point (1500, 700), beyond the 768x576 frame, so it never holds anyone: "
            "write its points in 0..1 of the frame (they then fit any resolution) or in pixels of this frame"
        ]
