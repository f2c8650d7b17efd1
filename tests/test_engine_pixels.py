"""Pre-processing compiled into the model where the engine offers it (OpenVINO's PrePostProcessor, `openvino.
preprocess: engine`, the default on a GPU or NPU): the engine is handed the letterboxed BGR uint8 frame and converts
it itself; the detections are those of the float input made by our own pre-processing, on real models and video
frames. On the CPU our own stays the default (it cost less CPU there: benchmarks.overhead (d))."""

from __future__ import annotations

import numpy as np
import pytest

from edge_inference.backends import BackendOptions, open_backend
from edge_inference.backends.openvino_backend import takes_pixels
from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from tests.conftest import MODELS, video_frame

CASES = {
    "yolox-nano IR (BGR, raw 0..255)": MODELS / "openvino/yolox_nano.xml",
    "NanoDet-m ONNX (BGR, ImageNet mean and std)": MODELS / "onnx/nanodet_m.onnx",
    "YOLOv8n int8 ONNX (RGB, /255)": MODELS / "onnx/yolov8n_int8.onnx",
}


def _boxes(detections):
    return np.array([[d.box.x1, d.box.y1, d.box.x2, d.box.y2, d.score, d.class_id] for d in detections])


@pytest.mark.parametrize("model", CASES.values(), ids=CASES.keys())
def test_openvino_takes_the_pixels_and_finds_what_our_pre_processing_finds(model):
    engine = {"openvino": {"preprocess": "engine"}}
    taking = load_detector(DetectorConfig(str(model), backend="openvino", device="CPU", engine_options=engine))
    plain = Detector(open_backend("openvino", model, BackendOptions("CPU")), taking.spec)
    try:
        pre = taking.spec.preprocessing
        assert taking.backend.pixels is not None and plain.backend.pixels is None
        assert taking.backend.inputs[0].dtype == np.uint8
        assert taking.backend.inputs[0].shape == (1, pre.height, pre.width, 3)
        found = 0
        for index in (0, 200, 400, 600):
            frame = video_frame(index)
            ours, theirs = _boxes(plain.detect(frame).detections), _boxes(taking.detect(frame).detections)
            assert ours.shape == theirs.shape, index
            np.testing.assert_allclose(theirs[:, :4], ours[:, :4], atol=0.5)  # pixels
            np.testing.assert_allclose(theirs[:, 4], ours[:, 4], atol=2e-3)  # scores
            assert (theirs[:, 5] == ours[:, 5]).all()
            found += len(ours)
        assert found > 0
    finally:
        taking.close()
        plain.close()


def test_an_integer_input_stays_ours():
    """An int8 TFLite model's input is already the model's own quantised pixels: nothing to compile in."""
    engine = {"openvino": {"preprocess": "engine"}}
    model = str(MODELS / "tflite/yolov8n_full_integer_quant.tflite")
    detector = load_detector(DetectorConfig(model, backend="openvino", device="CPU", engine_options=engine))
    try:
        assert detector.backend.pixels is None and detector.backend.inputs[0].dtype == np.int8
        assert any(d.label == "person" for d in detector.detect(video_frame(0)).detections)
    finally:
        detector.close()


def test_the_engine_takes_the_pixels_on_a_gpu_or_npu_by_default_and_on_the_cpu_when_asked():
    assert [takes_pixels("auto", d) for d in ("GPU", "GPU.1", "NPU", "CPU", "AUTO", "AUTO:GPU,CPU")] == [
        True,
        True,
        True,
        False,
        False,
        False,
    ]
    assert takes_pixels("engine", "CPU") and not takes_pixels("host", "GPU")
    detector = load_detector(DetectorConfig(str(MODELS / "openvino/yolox_nano.xml"), backend="openvino"))
    try:
        assert detector.backend.pixels is None and detector.backend.inputs[0].dtype == np.float32  # AUTO here
    finally:
        detector.close()
