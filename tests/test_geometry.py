import numpy as np
import pytest

from edge_inference.models.detection import BoxXYXY
from edge_inference.models.spec import Preprocessing
from edge_inference.models.transform import ImageTransform


def test_box_iou_and_transforms():
    a = BoxXYXY(0, 0, 10, 10)
    assert a.iou(a) == 1.0
    assert a.iou(BoxXYXY(5, 0, 15, 10)) == pytest.approx(50 / 150)
    assert a.iou(BoxXYXY(20, 20, 30, 30)) == 0.0
    assert a.scale(2, 3) == BoxXYXY(0, 0, 20, 30)
    assert BoxXYXY(5, 5, 1, 1).area == 0.0


@pytest.mark.parametrize("anchor", ["center", "top-left"])
def test_letterbox_round_trip(anchor):
    pre = Preprocessing(width=416, height=416, anchor=anchor)
    t = ImageTransform.fit(768, 576, pre)
    assert t.resized_width == 416 and t.resized_height == 312
    assert t.pad_x == 0 and t.pad_y == (52 if anchor == "center" else 0)
    original = np.array([[100.0, 50.0, 700.0, 500.0]])
    model_px = original * t.scale_x + np.array([t.pad_x, t.pad_y, t.pad_x, t.pad_y])
    np.testing.assert_allclose(t.boxes_to_original(model_px), original, atol=1e-6)


def test_stretch_and_clipping():
    t = ImageTransform.fit(600, 300, Preprocessing(width=300, height=300, resize="stretch"))
    assert (t.scale_x, t.scale_y) == (0.5, 1.0)
    boxes = t.boxes_to_original(np.array([[-10.0, -5.0, 400.0, 350.0]]))
    np.testing.assert_allclose(boxes, [[0, 0, 600, 300]])
