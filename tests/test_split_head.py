"""`edge models convert --to rknn --split-head`: a stock Ultralytics YOLOv8 export given rknn_model_zoo's nine outputs
(per stride the DFL box logits, the class scores, their clipped sum) by graph surgery, checked against the model's
own single output on ONNX Runtime; the rknn conversion of the split model is judged on Rockchip's simulator in
test_convert.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.tools.conversion.split_head import split_yolov8_head
from edge_inference.models.overrides import SpecOverrides
from tests.conftest import MODELS, VTEST, skimage_photo
from tests.float_yolov8n import float_yolov8n
from tests.helpers import run_edge
from tests.test_cli_detect import assert_one_clear_error

YOLOV8N_INT8 = MODELS / "onnx" / "yolov8n_int8.onnx"


@pytest.fixture(scope="module")
def yolov8n(tmp_path_factory) -> Path:
    return float_yolov8n(YOLOV8N_INT8, tmp_path_factory.mktemp("yolov8n") / "yolov8n.onnx")


@pytest.fixture(scope="module")
def split(yolov8n) -> Path:
    import onnx

    target = yolov8n.with_name("yolov8n-split.onnx")
    onnx.save(split_yolov8_head(onnx.load(str(yolov8n))), str(target))
    return target


def test_the_split_outputs_are_the_models_own_scores_in_the_zoos_order(yolov8n, split):
    """Per stride 8, 16, 32: box logits (64), class scores (80), their clipped sum (1). The class scores are those of
    the model's own output, cell for cell (Ultralytics flattens each stride's grid row by row, strides in order)."""
    x = np.random.default_rng(7).random((1, 3, 640, 640), dtype=np.float32)
    (whole,) = ort.InferenceSession(str(yolov8n), providers=["CPUExecutionProvider"]).run(None, {"images": x})
    parts = ort.InferenceSession(str(split), providers=["CPUExecutionProvider"]).run(None, {"images": x})
    assert [p.shape for p in parts] == [
        (1, channels, 640 // stride, 640 // stride) for stride in (8, 16, 32) for channels in (64, 80, 1)
    ]
    first = 0
    for box, scores, summed in zip(parts[0::3], parts[1::3], parts[2::3], strict=True):
        cells = scores.shape[2] * scores.shape[3]
        np.testing.assert_allclose(scores.reshape(80, cells), whole[0, 4:, first : first + cells], atol=1e-5)
        np.testing.assert_allclose(summed[0, 0], np.clip(scores[0].sum(axis=0), 0, 1), atol=1e-5)
        assert box.std() > 0.1  # logits, not a constant left behind
        first += cells
    assert first == whole.shape[2]


@pytest.mark.parametrize("photo", ["astronaut", "chelsea", "coffee"])
def test_the_split_model_decoded_by_yolov8_rknn_finds_what_the_export_finds(yolov8n, split, photo):
    """Recognised as the zoo's layout from its nine outputs; the same boxes and scores as the export's own head on a
    real photo (Ultralytics letterboxes with grey 114, which the converted file's sidecar carries)."""
    whole = load_detector(DetectorConfig(str(yolov8n), backend="onnx", threads=1))
    parted = load_detector(
        DetectorConfig(str(split), backend="onnx", threads=1, overrides=SpecOverrides(pad_value=114))
    )
    try:
        assert whole.spec.decoder == "yolov8" and parted.spec.decoder == "yolov8-rknn"
        image = skimage_photo(photo)
        expected, got = whole.detect(image).detections, parted.detect(image).detections
        assert expected and [d.label for d in got] == [d.label for d in expected]
        for a, b in zip(got, expected, strict=True):
            assert a.box.iou(b.box) >= 0.99 and a.score == pytest.approx(b.score, abs=1e-4)
    finally:
        whole.close()
        parted.close()


@pytest.mark.process
def test_a_model_without_a_yolov8_head_is_refused_in_one_line(tmp_path):
    import onnx

    with pytest.raises(EdgeError, match=r"its output is \(1, 3549, 85\); convert it without --split-head"):
        split_yolov8_head(onnx.load(str(MODELS / "onnx" / "yolox_nano.onnx")))
    env = {"EDGE_MODEL_CACHE": str(tmp_path / "cache"), "EDGE_MODEL_MIRROR": str(MODELS)}
    # said before any footage is read: the source named here does not exist
    proc = run_edge("models", "convert", "yolox-nano", "--to", "rknn", "--split-head", "--calibrate", "/nope.avi",
                    env=env)  # fmt: skip
    assert_one_clear_error(proc, "--split-head takes a YOLOv8/YOLO11 detection export")
    proc = run_edge("models", "convert", "yolox-nano", "--to", "onnx-int8", "--split-head", "--calibrate", str(VTEST),
                    env=env)  # fmt: skip
    assert_one_clear_error(proc, "--split-head and --no-split-head are for --to rknn only")
    assert not (tmp_path / "cache" / "converted").exists() or not any((tmp_path / "cache" / "converted").iterdir())


def test_yolov8s_box_branches_stay_in_float_with_its_class_branches(yolov8n):
    """The head kept in float by every int8 target reaches back to the box branches' last convolutions (Ultralytics'
    `cv2.N.2`), past DFL's fixed convolution: it used to stop at DFL, leaving the box branches in int8 and
    rknn-toolkit2's float16 subgraph starting inside DFL, where its hybrid step failed with an IndexError."""
    import onnx
    import openvino as ov

    from edge_inference.edge.tools.conversion.quantize import float_subgraphs, onnx_head, openvino_head

    model = onnx.load(str(yolov8n))
    branches = {
        f"/model.22/{branch}.{level}/{branch}.{level}.2/Conv" for branch in ("cv2", "cv3") for level in range(3)
    }
    assert branches <= set(onnx_head(model))
    assert branches <= set(openvino_head(ov.Core().read_model(str(yolov8n))))
    entries = [first for first, last in float_subgraphs(model)[1:]]
    assert len(entries) == 6 and all(entry.endswith(".1/act/Mul_output_0") for entry in entries), entries
