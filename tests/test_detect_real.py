"""Real models on real photos and video frames, against boxes set by inspection (tests/expectations.py)."""

from __future__ import annotations

import numpy as np
import pytest

from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.models.detection import BoxXYXY
from tests.conftest import MODELS
from tests.expectations import PHOTO_OBJECTS, VTEST_PEOPLE

ONNX_MODELS = {
    "yolox_nano": MODELS / "onnx/yolox_nano.onnx",
    "nanodet_m": MODELS / "onnx/nanodet_m.onnx",
    "yolov8n_int8": MODELS / "onnx/yolov8n_int8.onnx",
    "ssd_mobilenet_v2": MODELS / "onnx/ssd_mobilenet_v2_coco_quant_postprocess.onnx",
}
MIN_IOU = 0.5


@pytest.fixture(scope="module", params=sorted(ONNX_MODELS))
def detector(request):
    det = load_detector(DetectorConfig(str(ONNX_MODELS[request.param]), backend="onnx"))
    yield det
    det.close()


def best_iou(detections, label, expected):
    box = BoxXYXY(*expected)
    return max((d.box.iou(box) for d in detections if d.label == label), default=0.0)


@pytest.mark.parametrize("photo", sorted(PHOTO_OBJECTS))
def test_finds_the_object_in_each_photo(detector, photos, photo):
    label, expected = PHOTO_OBJECTS[photo]
    result = detector.detect(photos[photo])
    assert (result.width, result.height) == (photos[photo].shape[1], photos[photo].shape[0])
    assert best_iou(result.detections, label, expected) >= MIN_IOU, [
        (d.label, round(d.score, 2), d.box.as_list(0)) for d in result.detections
    ]


def test_finds_the_walkers_in_vtest_frame_0(detector, vtest_frames):
    detections = detector.detect(vtest_frames[0]).detections
    for person in VTEST_PEOPLE[0]:
        assert best_iou(detections, "person", person) >= MIN_IOU, (person, detections)


def test_people_in_a_crowded_frame_and_no_phantom_people(detector, vtest_frames):
    detections = detector.detect(vtest_frames[100]).detections
    found = sum(best_iou(detections, "person", p) >= MIN_IOU for p in VTEST_PEOPLE[100])
    assert found >= 3, detections
    # Every confident person is near somebody real (the five labelled, or the small ones in the distance).
    for d in detections:
        if d.label == "person" and d.score >= 0.5:
            assert d.box.y2 < 300, d  # nobody stands on the lawn in the lower half of this frame


def test_timings_are_reported(detector, photos):
    timings = detector.detect(photos["chelsea"]).timings
    assert timings.inference_ms > 0 and timings.preprocess_ms > 0 and timings.postprocess_ms > 0


@pytest.mark.parametrize("where", [4, 20])  # the objectness; the cat class's score
def test_outputs_with_inf_fail_the_frame_instead_of_reaching_json(where, photos):
    """A broken model's Inf made `"score": Infinity` or an Inf box in REST and SSE, which a browser's JSON.parse
    refuses; NaN scores fall below every threshold and are never kept."""
    from edge_inference.backends import BackendError

    detector = load_detector(DetectorConfig(str(MODELS / "onnx" / "yolox_nano.onnx"), "onnx"))
    try:
        prepared = detector.prepare(photos["chelsea"])  # a cat
        raw = [output.copy() for output in detector.infer(prepared.tensor)]
        best = int(raw[0][0, :, 4].argmax())
        assert detector.decode(raw, prepared.transform)  # the cat, before
        raw[0][0, best, where] = np.inf
        with pytest.raises(BackendError, match=r"yolox_nano.onnx gave NaN or Inf for boxes or scores"):
            detector.decode(raw, prepared.transform)
        raw[0][0, best, where] = np.nan
        assert all(np.isfinite(d.score) and np.isfinite(d.box.as_list()).all() for d in
                   detector.decode(raw, prepared.transform))  # fmt: skip
    finally:
        detector.close()
