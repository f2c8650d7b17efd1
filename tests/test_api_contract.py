"""The OpenAPI document describes what every JSON route returns, and the answers match it. In-process."""

from __future__ import annotations

import time

from tests.inprocess import app_client, service_config, wait_ready


def _schema(document: dict, path: str) -> dict:
    return document["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]


def test_every_json_route_has_a_response_model_and_answers_by_it():
    with app_client(service_config()) as client:
        document = client.get("/openapi.json").json()
        assert _schema(document, "/api/v1/stats")["$ref"].endswith("/Stats")
        assert _schema(document, "/api/v1/compare")["items"]["$ref"].endswith("/CompareGroupFigures")
        assert _schema(document, "/api/v1/backends")["items"]["$ref"].endswith("/BackendInfo")
        assert _schema(document, "/api/v1/streams")["items"]["$ref"].endswith("/StreamInfo")
        assert "503" in document["paths"]["/api/v1/detect"]["post"]["responses"]
        stream_figures = document["components"]["schemas"]["StreamFigures"]["properties"]
        assert {"stalls", "restarts", "load_failures", "error"} <= set(stream_figures)

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
