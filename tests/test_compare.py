"""Live comparison through the API: one source, the same frames through each backend, agreement with the first."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from edge_inference.edge.config import ServiceConfig, compare_member_ids
from tests.conftest import MODELS, VTEST
from tests.helpers import run_edge
from tests.server import running_server
from tests.test_watchdogs import wait_for


@pytest.mark.process
def test_compare_api_and_its_event_stream(tmp_path):
    config = tmp_path / "compare.yaml"
    config.write_text(
        f"streams:\n  - id: yard\n    source: {VTEST}\n    model: yolox-nano\n    loop: true\n"
        f"    compare: [onnx, tflite]\n"
    )
    with running_server(["--config", str(config)], tmp_path / "log") as server:
        server.wait_until("/health/ready")
        server.wait_for_frames("yard-tflite", 30)
        streams = {s["id"]: s for s in server.client.get("/api/v1/streams").json()}
        assert set(streams) == {"yard-onnx", "yard-tflite"}
        assert streams["yard-tflite"]["model"] == "yolox-nano-tflite" and streams["yard-onnx"]["group"] == "yard"
        assert all(s["state"] == "running" for s in streams.values())
        early: list[dict] = []  # agreement over fewer frames than it needs: not given (0.82 once read, then 0.998)

        def compared() -> dict | None:
            (group,) = server.client.get("/api/v1/compare").json()
            rows = {r["backend"]: r for r in group["backends"]}
            if rows["tflite"]["agreement"]["frames"] < rows["tflite"]["agreement"]["needs"]:
                early.append(rows["tflite"]["agreement"])
                return None
            return group

        group = wait_for(compared, "the agreement's frames", timeout=120)
        assert all(a["map50"] is None for a in early), early
        assert group["group"] == "yard" and group["source"] == str(VTEST)
        rows = {r["backend"]: r for r in group["backends"]}
        assert rows["onnx"]["agreement"]["map50"] == 1.0  # the reference agrees with itself
        tflite = rows["tflite"]["agreement"]
        assert tflite["reference"] == "yard-onnx" and tflite["frames"] >= 30 and tflite["map50"] >= 0.95
        assert rows["tflite"]["fps_processed"] > 0 and rows["tflite"]["latency_ms"]["inference"]["p50"] > 0
        # both pipelines were offered the very same frames: the agreement above is computed on common frame indices
        # (`frames` >= 30); how far apart their newest frames are depends on each engine's speed, so it is not checked
        with server.client.stream("GET", "/api/v1/compare/events?interval=0.5") as response:
            lines = (line for line in response.iter_lines() if line.startswith("data:"))
            first = json.loads(next(lines).split(":", 1)[1])
            second = json.loads(next(lines).split(":", 1)[1])  # the figures keep coming
        assert first[0]["group"] == second[0]["group"] == "yard"


@pytest.mark.process
def test_a_pair_that_cannot_run_is_refused_at_start(tmp_path):
    proc = run_edge(
        "serve", "--source", str(VTEST), "--model", "nanodet-m", "--compare", "onnx,tflite", "--port", "0", timeout=60
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "the registry has no nanodet-m file that tflite can run" in proc.stderr


def test_pipeline_ids_never_collide():
    two_devices = ServiceConfig.model_validate(
        {"streams": [{"id": "cam", "source": "x", "compare": ["openvino:CPU", "openvino:AUTO", "onnx"]}]}
    )
    assert compare_member_ids("cam", two_devices.streams[0].compare) == [
        "cam-openvino-cpu",
        "cam-openvino-auto",
        "cam-onnx",
    ]
    for streams, message in [
        (
            [{"id": "cam", "source": "x", "compare": ["onnx", "tflite"]}, {"id": "cam-onnx", "source": "y"}],
            "used twice",
        ),
        ([{"id": "cam", "source": "x", "compare": ["onnx", "onnx"]}], "same backend twice"),
    ]:
        with pytest.raises(ValidationError, match=message):
            ServiceConfig.model_validate({"streams": streams})


@pytest.mark.process
def test_an_unknown_compare_backend_is_one_clear_line():
    model = str(MODELS / "onnx" / "yolox_nano.onnx")
    proc = run_edge("serve", "--source", str(VTEST), "--model", model, "--compare", "onnx,bogus", "--port", "0")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "compare: unknown backend 'bogus'; choose one of: onnx," in proc.stderr
