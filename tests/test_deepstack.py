"""DeepStack's detection API, called by deepstack-python (the client Home Assistant's deepstack_object integration
uses; Blue Iris and Agent DVR send the same form) against a real server with a token."""

from __future__ import annotations

import httpx
import pytest
from deepstack.core import DeepstackException, DeepstackObject, get_objects_summary

from tests.conftest import MEDIA, VTEST
from tests.inprocess import SSD_ONNX
from tests.server import running_server

TOKEN = "deepstack-token-1234"
PHOTO = MEDIA / "kite_and_cold.jpg"


def test_a_deepstack_client_gets_the_detections_of_the_api_with_its_key_as_the_token(tmp_path):
    streams = f"streams:\n  - id: yard\n    source: {VTEST}\n    model: {SSD_ONNX}\n    loop: true\n"
    config = tmp_path / "streams.yaml"
    config.write_text(streams)
    image = PHOTO.read_bytes()
    with running_server(["--config", str(config)], tmp_path / "serve.log", token=TOKEN) as server:
        server.wait_until("/health/ready", timeout=180)
        client = DeepstackObject(ip="127.0.0.1", port=server.port, api_key=TOKEN, min_confidence=0.5, timeout=120)
        predictions = client.detect(image)
        ours = server.client.post("/api/v1/detect", params={"conf": 0.5}, content=image, timeout=120).json()

        assert get_objects_summary(predictions).get("person", 0) >= 1  # the client's own reading of the answer
        assert len(predictions) == len(ours["detections"])
        for seen, detection in zip(predictions, ours["detections"], strict=True):
            assert seen["label"] == detection["label"] and seen["confidence"] >= 0.5
            assert seen["confidence"] == pytest.approx(detection["score"], abs=1e-4)
            corners = [seen["x_min"], seen["y_min"], seen["x_max"], seen["y_max"]]
            assert corners == pytest.approx(detection["box"], abs=0.5)  # whole pixels, as DeepStack gives them
            assert 0 <= seen["x_min"] < seen["x_max"] <= ours["width"] and seen["y_min"] < seen["y_max"]
        # a custom model by name: the stream of that name
        assert DeepstackObject(ip="127.0.0.1", port=server.port, api_key=TOKEN, custom_model="yard").detect(image)

        with pytest.raises(DeepstackException, match="status code: 401"):
            DeepstackObject(ip="127.0.0.1", port=server.port, api_key="wrong", timeout=60).detect(image)
        with pytest.raises(DeepstackException, match="Bad url"):  # the client's words for a 404
            DeepstackObject(ip="127.0.0.1", port=server.port, api_key=TOKEN, custom_model="ipcam-general").detect(image)
        refused = httpx.post(
            f"{server.base}/v1/vision/detection",
            files={"image": image},
            data={"api_key": TOKEN, "min_confidence": "45%"},
            timeout=60,
        )
        assert refused.status_code == 400 and refused.json()["success"] is False
        assert "min_confidence '45%' is not a fraction of 1" in refused.json()["error"]
        unknown = httpx.post(
            f"{server.base}/v1/vision/custom/ipcam-general", files={"image": image}, data={"api_key": TOKEN}
        )
        assert "custom/<name> names a stream (yard)" in unknown.json()["error"]
        listed = httpx.post(f"{server.base}/v1/vision/custom/list", data={"api_key": TOKEN})
        assert listed.json() == {"success": True, "models": ["yard"]}  # as Blue Iris asks CodeProject.AI for them
        assert httpx.post(f"{server.base}/v1/vision/custom/list", data={"api_key": "wrong"}).status_code == 401
        # the key is a token as good as the others: without it, nothing else on the service opens
        assert httpx.get(f"{server.base}/api/v1/streams").status_code == 401
