"""Each decoder on hand-built output arrays whose one object is known exactly."""

import numpy as np
import pytest

from edge_inference.models.decoders import DECODERS, DecodeContext, UnknownLayoutError, detect_decoder
from edge_inference.models.labels import COCO80, COCO90
from edge_inference.models.spec import ModelSpec, Preprocessing
from edge_inference.models.transform import ImageTransform


def _ctx(decoder, width=416, height=416, original=(832, 832), labels=None, normalized=None):
    pre = Preprocessing(width=width, height=height, anchor="top-left")
    spec = ModelSpec("test", decoder, pre, labels or dict(enumerate(COCO80)), boxes_normalized=normalized)
    return DecodeContext(spec, ImageTransform.fit(*original, pre), conf_threshold=0.3, iou_threshold=0.5)


def _one(dets):
    assert len(dets) == 1, dets
    return dets[0]


def test_yolox_grid_decode():
    out = np.zeros((1, 3549, 85), np.float32)
    # stride-16 level starts after 52*52 cells; cell (x=10, y=5) of its 26x26 grid
    row = 52 * 52 + 5 * 26 + 10
    out[0, row, :4] = [0.5, 0.25, np.log(4.0), np.log(2.0)]  # centre (10.5, 5.25) cells, 4x2 cells
    out[0, row, 4] = 0.9
    out[0, row, 5 + 2] = 0.8  # car
    out[0, row + 1, 4] = 0.9  # objectness alone is not enough: its class scores are 0
    det = _one(DECODERS["yolox"].decode([out], _ctx("yolox")))
    assert det.label == "car" and det.score == pytest.approx(0.72)
    cx, cy, w, h = 10.5 * 16, 5.25 * 16, 64, 32
    expected = np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]) * 2  # original is 2x the input
    np.testing.assert_allclose(det.box.as_list(3), expected, atol=1e-3)


def test_yolov8_pixels_and_normalised_give_the_same_box():
    out = np.zeros((1, 84, 8400), np.float32)
    out[0, :4, 123] = [320, 240, 100, 50]
    out[0, 4 + 16, 123] = 0.7  # dog
    pixel = _one(DECODERS["yolov8"].decode([out], _ctx("yolov8", 640, 640, (640, 640))))
    normed = out.copy()
    normed[0, :4] /= 640
    norm = _one(DECODERS["yolov8"].decode([normed], _ctx("yolov8", 640, 640, (640, 640))))
    assert pixel.label == norm.label == "dog"
    np.testing.assert_allclose(pixel.box.as_list(3), [270, 215, 370, 265], atol=1e-3)
    np.testing.assert_allclose(norm.box.as_list(3), pixel.box.as_list(3), atol=1e-3)


def test_yolov5_objectness_times_class():
    out = np.zeros((1, 3 * 3549, 85), np.float32)
    out[0, 7, :5] = [100, 100, 40, 20, 0.5]
    out[0, 7, 5] = 0.9
    out[0, 8, :5] = [300, 300, 40, 20, 0.5]
    out[0, 8, 5] = 0.5  # 0.25 < conf
    det = _one(DECODERS["yolov5"].decode([out], _ctx("yolov5", original=(416, 416))))
    assert det.label == "person" and det.score == pytest.approx(0.45)
    np.testing.assert_allclose(det.box.as_list(3), [80, 90, 120, 110], atol=1e-3)


def test_end2end_keeps_overlaps_and_maps_classes():
    out = np.zeros((1, 300, 6), np.float32)
    out[0, 0] = [10, 10, 50, 50, 0.9, 2]
    out[0, 1] = [12, 12, 50, 50, 0.8, 2]  # no NMS: the model already chose
    dets = DECODERS["yolo-end2end"].decode([out], _ctx("yolo-end2end", original=(416, 416)))
    assert [d.label for d in dets] == ["car", "car"]


def test_ssd_postprocess_outputs_in_either_order():
    boxes = np.zeros((1, 20, 4), np.float32)
    boxes[0, 0] = [0.1, 0.2, 0.5, 0.6]  # ymin, xmin, ymax, xmax
    classes = np.zeros((1, 20), np.float32)
    classes[0, 0] = 16  # COCO category 17 (cat), 0-based as TFLite emits it
    scores = np.zeros((1, 20), np.float32)
    scores[0, 0] = 0.9
    count = np.array([1.0], np.float32)
    ctx = _ctx("ssd", 300, 300, (600, 300), labels=dict(COCO90))
    for outputs in ([boxes, classes, scores, count], [boxes, scores, count, classes]):
        det = _one(DECODERS["ssd"].decode(outputs, ctx))
        assert det.label == "cat"
        # letterbox of 600x300 into 300x300 (top-left): scale 0.5, no padding on the left
        np.testing.assert_allclose(det.box.as_list(3), [0.2 * 600, 0.1 * 600, 0.6 * 600, 0.5 * 600], atol=1e-3)


def test_nanodet_distribution_decode():
    cells = [52 * 52, 26 * 26, 13 * 13]
    cls = [np.zeros((1, n, 80), np.float32) for n in cells]
    reg = [np.full((1, n, 32), -20.0, np.float32) for n in cells]
    # stride 8, cell (x=3, y=4): centre (3*8+3.5, 4*8+3.5); distances 2,1,3,4 bins x 8 px
    cell = 4 * 52 + 3
    cls[0][0, cell, 15] = 0.8  # cat
    for side, bin_index in enumerate([2, 1, 3, 4]):
        reg[0][0, cell, side * 8 + bin_index] = 20.0
    det = _one(DECODERS["nanodet"].decode(cls + reg, _ctx("nanodet", original=(416, 416))))
    cx, cy = 3 * 8 + 3.5, 4 * 8 + 3.5
    assert det.label == "cat"
    np.testing.assert_allclose(det.box.as_list(3), [cx - 16, cy - 8, cx + 24, cy + 32], atol=1e-2)


@pytest.mark.parametrize(
    ("shapes", "size", "name"),
    [
        ([(1, 3549, 85)], 416, "yolox"),
        ([(1, 10647, 85)], 416, "yolov5"),
        ([(1, 84, 8400)], 640, "yolov8"),
        ([(1, 84, 2100)], 320, "yolov8"),
        ([(1, 300, 6)], 640, "yolo-end2end"),
        ([(1, 20, 4), (1, 20), (1, 20), (1,)], 300, "ssd"),
        ([(1, 2704, 80), (1, 676, 80), (1, 169, 80), (1, 2704, 32), (1, 676, 32), (1, 169, 32)], 416, "nanodet"),
    ],
)
def test_layout_detection(shapes, size, name):
    assert detect_decoder(shapes, [f"o{i}" for i in range(len(shapes))], size, size).name == name


def test_unknown_layout_names_outputs_and_the_way_out():
    with pytest.raises(UnknownLayoutError) as info:
        detect_decoder([(1, 1000)], ["logits"], 224, 224)
    message = str(info.value)
    assert "logits [1, 1000]" in message and "--decoder" in message and "yolox" in message


def _hailo_rows(per_class: dict[int, list[list[float]]]) -> np.ndarray:
    """The hailo engine's output: pyhailort's per-class [n, 5] arrays as rows (1, N, 6) with the class id last."""
    rows = [[*box, class_id] for class_id, boxes in sorted(per_class.items()) for box in boxes]
    return np.array(rows, np.float32).reshape(1, -1, 6)


def test_hailo_on_chip_nms_decode():
    # y_min, x_min, y_max, x_max (0..1 of the 640x640 input), score
    people = [[0.25, 0.1, 0.75, 0.3, 0.9], [0.1, 0.1, 0.2, 0.2, 0.2]]
    rows = _hailo_rows({0: people, 2: [[0.5, 0.5, 0.6, 0.7, 0.8]]})
    pre = Preprocessing(width=640, height=640, anchor="center")
    spec = ModelSpec("hef", "hailo-nms", pre, dict(enumerate(COCO80)))
    # 1280x720 letterboxed into 640x640: scale 0.5, 140 rows of padding on top
    ctx = DecodeContext(spec, ImageTransform.fit(1280, 720, pre), conf_threshold=0.3)
    person, car = DECODERS["hailo-nms"].decode([rows], ctx)  # highest score first; 0.2 is dropped
    assert (person.label, car.label) == ("person", "car")
    np.testing.assert_allclose(person.box.as_list(3), [128, 40, 384, 680], atol=1e-3)
    np.testing.assert_allclose(car.box.as_list(3), [640, 360, 896, 488], atol=1e-3)
    assert person.score == pytest.approx(0.9) and car.score == pytest.approx(0.8)
    assert DECODERS["hailo-nms"].decode([_hailo_rows({})], ctx) == []


def test_hailo_nms_is_never_guessed_and_a_malformed_buffer_says_so():
    from edge_inference.models.errors import ModelError

    # rows of six are also what NMS-free YOLO gives: only the engine's word picks the Hailo decoder
    assert detect_decoder([(1, 12, 6)], ["yolov8n/yolov8_nms_postprocess"], 640, 640).name == "yolo-end2end"
    flat = np.zeros(40080, np.float32)  # HailoRT's raw flat buffer is not what the engine hands on
    pre = Preprocessing(width=640, height=640)
    ctx = DecodeContext(ModelSpec("hef", "hailo-nms", pre, dict(enumerate(COCO80))), ImageTransform.fit(640, 640, pre))
    with pytest.raises(ModelError, match=r"Hailo NMS output of shape \(40080,\): expected rows of 6"):
        DECODERS["hailo-nms"].decode([flat], ctx)


def test_raw_yolov8_heads_from_a_hef_read_as_per_level_distributions():
    """A .hef without on-chip NMS: per level, class scores [1, H*W, 80] and 4 x 16 distance bins [1, H*W, 64]."""
    cells = [80 * 80, 40 * 40, 20 * 20]
    cls = [np.zeros((1, n, 80), np.float32) for n in cells]
    reg = [np.full((1, n, 64), -20.0, np.float32) for n in cells]
    cell = 7 * 40 + 9  # stride 16, x=9, y=7
    cls[1][0, cell, 0] = 0.9  # person
    for side, bin_index in enumerate([3, 2, 5, 6]):
        reg[1][0, cell, side * 16 + bin_index] = 20.0
    pre = Preprocessing(width=640, height=640, anchor="top-left")
    spec = ModelSpec("hef", "nanodet", pre, dict(enumerate(COCO80)))  # 16 bins found from the output's width
    assert detect_decoder([a.shape for a in cls + reg], ["o"] * 6, 640, 640).name == "nanodet"
    det = _one(DECODERS["nanodet"].decode(cls + reg, DecodeContext(spec, ImageTransform.fit(640, 640, pre))))
    cx, cy = 9 * 16 + 7.5, 7 * 16 + 7.5  # the cell's centre (half a pixel from YOLOv8's own (x + 0.5) * stride)
    assert det.label == "person"
    np.testing.assert_allclose(det.box.as_list(3), [cx - 48, cy - 32, cx + 80, cy + 96], atol=1e-2)
