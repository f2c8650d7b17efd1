import numpy as np

from edge_inference.backends import Quantization
from edge_inference.models.preprocess import Preprocessor
from edge_inference.models.spec import Preprocessing


def _image():
    image = np.zeros((100, 200, 3), np.uint8)
    image[..., 0], image[..., 1], image[..., 2] = 10, 20, 30  # B, G, R
    return image


def test_letterbox_rgb_unit_scaling_nchw():
    pre = Preprocessing(width=64, height=64, layout="NCHW", color="RGB", anchor="center", pad_value=114)
    tensor, t = Preprocessor(pre, np.dtype(np.float32), None)(_image())
    assert tensor.shape == (1, 3, 64, 64) and (t.pad_x, t.pad_y) == (0, 16)
    np.testing.assert_allclose(tensor[0, :, 32, 32], [30 / 255, 20 / 255, 10 / 255], rtol=1e-6)
    np.testing.assert_allclose(tensor[0, :, 0, 32], [114 / 255] * 3, rtol=1e-6)  # padding row


def test_bgr_mean_std_top_left():
    pre = Preprocessing(width=64, height=64, color="BGR", anchor="top-left", pad_value=0, mean=(1, 2, 3), std=(2, 4, 8))
    tensor, t = Preprocessor(pre, np.dtype(np.float32), None)(_image())
    assert (t.pad_x, t.pad_y) == (0, 0)
    np.testing.assert_allclose(tensor[0, :, 10, 10], [(10 - 1) / 2, (20 - 2) / 4, (30 - 3) / 8])
    np.testing.assert_allclose(tensor[0, :, 60, 10], [-0.5, -0.5, -0.375])


def test_int8_input_quantisation_composes_with_scaling():
    pre = Preprocessing(width=32, height=32, layout="NHWC", resize="stretch")
    quant = Quantization(scale=0.018658, zero_point=-14)
    tensor, _ = Preprocessor(pre, np.dtype(np.int8), quant)(_image())
    assert tensor.dtype == np.int8 and tensor.shape == (1, 32, 32, 3)
    expected = [round(v / 255 / 0.018658) - 14 for v in (30, 20, 10)]
    assert tensor[0, 5, 5].tolist() == expected


def test_uint8_ssd_style_input_passes_pixels_through():
    pre = Preprocessing(width=32, height=32, layout="NHWC", resize="stretch", mean=(127.5,) * 3, std=(127.5,) * 3)
    quantised, _ = Preprocessor(pre, np.dtype(np.uint8), Quantization(0.0078125, 128))(_image())
    raw, _ = Preprocessor(pre, np.dtype(np.uint8), None)(_image())
    assert quantised[0, 5, 5].tolist() == raw[0, 5, 5].tolist() == [30, 20, 10]
