"""The OpenAPI document describes what every JSON route returns, and the answers match it. In-process."""

from __future__ import annotations

import time

import pytest

from tests.inprocess import app_client, service_config, wait_ready


def _schema(document: dict, path: str) -> dict:
    return document["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]


def test_every_route_documents_what_it_answers():
    """A JSON answer has a schema; a stream, an image or metrics says its media type instead of an empty JSON."""
    with app_client(service_config()) as client:
        document = client.get("/openapi.json").json()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            content = operation["responses"]["200"]["content"]
            assert content, (method, path)
            for media_type, body in content.items():
                if media_type == "application/json":
                    assert body.get("schema"), f"{method} {path} answers JSON without a schema"
    media = {p: set(ops["get"]["responses"]["200"]["content"]) for p, ops in document["paths"].items() if "get" in ops}
    assert media["/api/v1/streams/{stream_id}/events"] == {"text/event-stream"}
    assert media["/api/v1/streams/{stream_id}/snapshot.jpg"] == {"image/jpeg"}
    assert media["/api/v1/events/stream"] == {"text/event-stream"}
    assert media["/api/v1/events/{event_id}/snapshot.jpg"] == {"image/jpeg"}
    assert media["/api/v1/live"] == {"text/event-stream"}
    assert _schema(document, "/api/v1/setup")["$ref"].endswith("/ServiceSetup")
    assert _schema(document, "/api/v1/events")["$ref"].endswith("/EventPage")
    assert _schema(document, "/api/v1/events/{event_id}")["$ref"].endswith("/EventOut")


def test_what_a_client_can_get_wrong_is_in_the_document_in_the_shape_it_is_answered():
    """Unknown stream ids (404), the upload's body (required), and 422s in the published ValidationError shape."""
    with app_client(service_config()) as client:
        wait_ready(client)
        document = client.get("/openapi.json").json()
        for path, operations in document["paths"].items():
            if "{stream_id}" in path:
                assert all("404" in op["responses"] for op in operations.values()), path
        upload = document["paths"]["/api/v1/detect"]["post"]
        assert upload["requestBody"]["required"] and {"image/*", "multipart/form-data"} <= set(
            upload["requestBody"]["content"]
        )
        assert "404" in upload["responses"]
        assert client.get("/api/v1/streams/nope/snapshot.jpg").status_code == 404
        required = document["components"]["schemas"]["ValidationError"]["required"]
        answer = client.get("/api/v1/events", params={"limit": "many"})
        assert answer.status_code == 422
        for problem in answer.json()["detail"]:
            assert set(required) <= set(problem), problem


def test_numbers_a_machine_cannot_honour_are_refused_in_one_line(tmp_path):
    from edge_inference.edge.config import ConfigError, load_config

    config = tmp_path / "streams.yaml"
    config.write_text("streams:\n  - id: main\n    source: x.mp4\n    threads: 1000000\n")
    with pytest.raises(ConfigError) as refused:
        load_config(config)
    message = str(refused.value)
    assert "1000000 engine threads is more than this machine can use" in message and "\n" not in message


def test_every_json_route_has_a_response_model_and_answers_by_it():
    with app_client(service_config()) as client:
        document = client.get("/openapi.json").json()
        assert _schema(document, "/api/v1/stats")["$ref"].endswith("/ServiceStats")
        assert _schema(document, "/api/v1/compare")["items"]["$ref"].endswith("/CompareSnapshot")
        assert _schema(document, "/api/v1/backends")["items"]["$ref"].endswith("/BackendReport")
        assert _schema(document, "/api/v1/streams")["items"]["$ref"].endswith("/StreamSummary")
        assert _schema(document, "/api/v1/streams/{stream_id}/detections/latest")["$ref"].endswith("/LatestDetections")
        assert "503" in document["paths"]["/api/v1/detect"]["post"]["responses"]
        stream_figures = document["components"]["schemas"]["StreamLoad"]["properties"]
        assert {"stalls", "restarts", "load_failures", "error", "latency_ms"} <= set(stream_figures)

        wait_ready(client)
        deadline = time.monotonic() + 120
        while client.get("/api/v1/stats").json()["streams"]["main"]["frames_processed"] < 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        stats = client.get("/api/v1/stats").json()
        assert stats["streams"]["main"]["latency_ms"]["inference"]["p50"] > 0
        (backend,) = stats["backends"].values()
        assert backend["streams"] == ["main"]
        assert client.get("/api/v1/compare").json() == []
        assert {row["key"] for row in client.get("/api/v1/backends").json()} >= {"onnx", "tflite", "openvino"}
        latest = client.get("/api/v1/streams/main/detections/latest").json()
        latest_schema = document["components"]["schemas"]["LatestDetections"]
        assert set(latest) == set(latest_schema["properties"]) == set(latest_schema["required"])


def test_the_api_docs_and_the_icon_need_nothing_from_the_internet():
    with app_client(service_config()) as client:
        page = client.get("/docs").text
        assert "cdn" not in page.lower() and "/static-offline-docs/swagger-ui-bundle.js" in page
        for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
            assert client.get(f"/static-offline-docs/{asset}").status_code == 200, asset
        assert "cdn" not in client.get("/redoc").text.lower()
        icon = client.get("/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")


def test_setup_says_what_runs_so_a_client_asks_only_for_that():
    """The dashboard reads this first: no events asked of a service that keeps none, no comparison when none runs."""
    plain = service_config(backend="onnx")
    with app_client(plain) as client:
        assert client.get("/api/v1/setup").json() == {
            "streams": ["main"], "events": False, "compare_groups": [], "live": "/api/v1/live",
        }  # fmt: skip
        assert client.get("/api/v1/events").status_code == 404  # what the page no longer probes
    compared = service_config(compare=["onnx", "openvino"])
    with app_client(compared) as client:
        setup = client.get("/api/v1/setup").json()
    assert setup["streams"] == ["main-onnx", "main-openvino"] and setup["compare_groups"] == ["main"]
    assert setup["events"] is False


def test_an_address_that_is_not_there_is_answered_with_the_one_meant():
    """A bare "Not Found" or "Method Not Allowed" told a user typing an address from memory nothing: now the address
    meant, the method the route takes, or how to open a WebSocket; a route's own 404 keeps its words."""
    meant = {
        "/health": "(did you mean /health/live or /health/ready?)",
        "/api/v1/stream/main": "(did you mean /api/v1/streams/main?)",
        "/streams": "(did you mean /api/v1/streams?)",
        "/api/v1/streams/main/snapshot.png": "(did you mean /api/v1/streams/main/snapshot.jpg?)",
        "/api/v1/streams/main/detections": "(did you mean /api/v1/streams/main/detections/latest?)",
        "/metric": "(did you mean /metrics?)",
    }
    with app_client(service_config()) as client:
        for path, fragment in meant.items():
            answer = client.get(path)
            assert answer.status_code == 404 and fragment in answer.json()["detail"], answer.text
            assert "described at /docs" in answer.json()["detail"]
        upload = client.get("/api/v1/detect")
        assert upload.status_code == 405 and upload.headers["allow"] == "POST"
        assert (
            "takes POST, not GET: send an image, e.g. curl -F image=@photo.jpg http://localhost/api/v1/detect"
            in (upload.json()["detail"])
        )
        socket = client.get("/api/v1/streams/main/ws")
        assert socket.status_code == 426 and "connect to ws://localhost/api/v1/streams/main/ws" in socket.text
        wait_ready(client)  # a stream names its model by the file's spec once loaded: both answers after that
        one, listed = client.get("/api/v1/streams/main"), client.get("/api/v1/streams").json()[0]
        assert one.status_code == 200 and set(one.json()) == set(listed)
        assert (one.json()["id"], one.json()["source"], one.json()["model"]) == (
            "main",
            listed["source"],
            listed["model"],
        )
        assert client.get("/api/v1/streams/nope").json()["detail"] == "no stream 'nope'; streams: main"


def test_a_parameter_named_nearly_right_or_as_another_tool_names_it_is_answered_with_the_one_meant():
    """`snapshot.jpg?h=300&bbox=1` (Frigate's `latest.jpg` names), `?hieght=`, `?width=`, `/events?limt=5`,
    `/detect?threshold=0.5` were passed over: a full-size frame, every event, the stream's own threshold, and no word
    why. Each is now a 422 naming the parameter meant; a cache-buster (`?t=`, `?_=`) and Roboflow's `api_key`,
    `format` and `labels` are still passed over, as before."""
    import cv2
    import numpy as np

    from tests.conftest import MEDIA

    with app_client(service_config()) as client:
        wait_ready(client)
        snapshot = "/api/v1/streams/main/snapshot.jpg"
        deadline = time.monotonic() + 120  # ready is a loaded model; the first frame follows
        while client.get(snapshot).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        for query, name, meant in [
            ("h=300", "h", "height"),
            ("hieght=300", "hieght", "height"),
            ("width=320", "width", "height"),
            ("height=100&bbox=1", "bbox", "boxes"),
            ("qualty=50", "qualty", "quality"),
        ]:
            answer = client.get(f"{snapshot}?{query}")
            assert answer.status_code == 422, answer.text
            (error,) = answer.json()["detail"]
            assert error["loc"] == ["query", name] and error["type"] == "extra_forbidden"
            assert error["msg"] == (
                f"not a parameter here (did you mean {meant}?); this address takes: "
                "boxes, height, quality, regions, zones"
            )
        for query in ("t=1732500000", "_=17", "height=100&token=ignored-here"):
            image = client.get(f"{snapshot}?{query}")
            assert image.status_code == 200, image.text
        small = cv2.imdecode(np.frombuffer(client.get(f"{snapshot}?height=100&t=1").content, np.uint8), 1)
        assert small.shape[0] == 100
        events = client.get("/api/v1/events?limt=5")
        assert events.status_code == 422 and "(did you mean limit?)" in events.json()["detail"][0]["msg"]
        photo = {"image": ("cat.jpg", (MEDIA / "cat_720p.jpg").read_bytes(), "image/jpeg")}
        refused = client.post("/api/v1/detect?threshold=0.9", files=photo)
        assert refused.status_code == 422 and "(did you mean conf?)" in refused.json()["detail"][0]["msg"]
        roboflow = client.post("/api/v1/detect?api_key=abc&confidence=0.9&format=json&labels=on", files=photo)
        assert roboflow.status_code == 200 and all(d["score"] >= 0.9 for d in roboflow.json()["detections"])
