"""The remote engine against an Open Inference Protocol server that is not Triton (tests/kserve_server.py: the
protocol's required endpoints only, a real model on ONNX Runtime), and against that server answering wrong: each
wrong answer is one line naming the server, the model and what was wrong, and the engine works again once the
server answers right. (A real Triton: tests/test_triton.py.)"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from edge_inference.backends import BackendError, BackendOptions, open_backend
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from tests.conftest import MEDIA, MODELS
from tests.kserve_server import kserve_server

pytestmark = pytest.mark.process  # a server on a loopback socket
pytest.importorskip("tritonclient.http")
YOLOX = MODELS / "onnx" / "yolox_nano.onnx"
PHOTO = MEDIA / "cat_720p.jpg"


@pytest.fixture(scope="module")
def server():
    with kserve_server("yolox_nano", YOLOX) as (reference, model):
        yield reference, model


@pytest.fixture(autouse=True)
def behaving(server):
    server[1].misbehave = "none"
    yield
    server[1].misbehave = "none"


def test_a_server_with_only_the_protocols_endpoints_gives_the_local_engines_detections(server):
    """No `/v2/models/NAME/config` (Triton's extension): loading read it and failed with a 404 it could not parse."""
    reference, _ = server
    photo = cv2.imread(str(PHOTO))
    remote = load_detector(DetectorConfig(reference, "triton", engine_options={"triton": {"shared_memory": "off"}}))
    local = load_detector(DetectorConfig(str(YOLOX), "onnx"))
    try:
        found = remote.detect(photo).detections
        assert any(d.label == "cat" for d in found)
        assert found == local.detect(photo).detections
    finally:
        remote.close()
        local.close()


@pytest.mark.parametrize(
    ("misbehave", "said"),
    [
        ("wrong-shape", "output of shape [150832] where its metadata declares [1, 3549, 85]"),
        ("bytes", "as object where its metadata declares float32"),
        ("missing", "without its output"),
        ("nan", "with NaN or Inf in"),
        ("inf", "with NaN or Inf in"),
    ],
)
def test_a_wrong_answer_is_one_line_and_the_next_right_one_works(server, misbehave, said):
    reference, model = server
    address = reference.split("//")[1].split("/")[0]
    backend = open_backend("triton", reference, BackendOptions(engine_options={"shared_memory": "off"}))
    try:
        tensor = np.full(backend.inputs[0].shape, 114, backend.inputs[0].dtype)  # a grey frame
        model.misbehave = misbehave
        with pytest.raises(BackendError) as wrong:
            backend.run(tensor)
        line = str(wrong.value)
        assert "\n" not in line and address in line and "yolox_nano" in line and said in line, line
        model.misbehave = "none"
        assert backend.run(tensor)[0].shape == (1, 3549, 85)
    finally:
        backend.close()


def test_a_server_slow_to_give_its_statistics_never_holds_a_frame(server):
    """The statistics (for `server_ms`) were read on the inference thread every 2 s: a server slow to answer them
    held that frame as long. A statistics request held by the server now, and frames still come back."""
    import threading

    reference, model = server
    options = {"shared_memory": "off", "timeout_s": 300}  # a server slow but within its time
    backend = open_backend("triton", reference, BackendOptions(engine_options=options))
    tensor = np.full(backend.inputs[0].shape, 114, backend.inputs[0].dtype)
    model.statistics_asked.clear()
    model.statistics_held.clear()
    try:
        frames = threading.Thread(target=lambda: [backend.run(tensor) for _ in range(4)], daemon=True)
        frames.start()  # the first frame's end asks for the statistics
        assert model.statistics_asked.wait(60), "the statistics were never asked for"
        frames.join(60)
        assert not frames.is_alive(), "frames waited on the statistics request"
    finally:
        model.statistics_held.set()
        backend.close()


# --- Seldon's MLServer: a second real server (tests/mlserver.py) ----------------------------------------------------


@pytest.fixture(scope="module")
def mlserver(tmp_path_factory):
    from tests.mlserver import MLServer

    server = MLServer(tmp_path_factory.mktemp("mlserver"), {"yolox_nano": YOLOX}).start()
    yield server
    server.stop()


@pytest.mark.system
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_mlserver_gives_the_local_engines_detections_over_either_protocol(mlserver, protocol):
    """MLServer offers none of Triton's extensions (config, statistics, shared memory, binary tensors): loading asked
    for the config (a 404 it could not parse) and HTTP sent binary tensors (422). The photos' detections equal the
    local file's, and the engine says the tensors go over the socket."""
    from tests.helpers import run_edge
    from tests.test_triton import PHOTOS, assert_same_detections, records

    remote = run_edge("detect", *PHOTOS, "--model", getattr(mlserver, protocol)("yolox_nano"), "--json")
    local = run_edge("detect", *PHOTOS, "--model", str(YOLOX), "--backend", "onnx", "--json")
    found = records(remote)
    assert any(d["label"] == "cat" for d in found[0]["detections"])
    assert_same_detections(found, records(local))
    assert "the server offers no shared memory" in remote.stderr and "Traceback" not in remote.stderr
