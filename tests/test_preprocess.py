import cv2
import numpy as np
import pytest

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


def _expected(image_bgr, pre, dtype, quant):
    """The model's input by its definition: (pixel - mean) / std per channel, then quantised; computed in float64."""
    pixels = image_bgr[..., ::-1] if pre.color == "RGB" else image_bgr
    values = (pixels.astype(np.float64) - np.array(pre.mean)) / np.array(pre.std)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        quantised = np.rint(values / quant.scale + quant.zero_point) if quant else None
        values = pixels if quantised is None else np.clip(quantised, info.min, info.max)
    values = values.astype(dtype)
    return values.transpose(2, 0, 1) if pre.layout == "NCHW" else values


EVERY_PATH = [
    pytest.mark.parametrize("layout", ["NCHW", "NHWC"]),
    pytest.mark.parametrize("color", ["RGB", "BGR"]),
    pytest.mark.parametrize(
        ("dtype", "norm", "quant"),
        [
            (np.uint8, ((0, 0, 0), (1, 1, 1)), None),  # raw pixels
            (np.uint8, ((127.5,) * 3, (127.5,) * 3), Quantization(1 / 127.5, 128)),  # SSD MobileNet: identity
            (np.int8, ((0, 0, 0), (255, 255, 255)), Quantization(1 / 255, -128)),  # Ultralytics int8: one XOR
            (np.int8, ((0, 0, 0), (255, 255, 255)), Quantization(0.018658, -14)),  # one shared affine, vectorised
            (np.uint8, ((0, 0, 0), (255, 255, 255)), Quantization(0.0078125, 0)),  # the same on uint8, with .5 ties
            (np.int8, ((1, 2, 3), (50.3, 60.7, 70.1)), Quantization(0.0213, 3)),  # a table per channel, no .5 ties
            (np.float32, ((0, 0, 0), (1, 1, 1)), None),  # YOLOX: the cast alone
            (np.float32, ((0, 0, 0), (255, 255, 255)), None),
            (np.float32, ((123.7, 116.3, 103.5), (58.4, 57.1, 57.4)), None),  # ImageNet
            (np.float16, ((0, 0, 0), (255, 255, 255)), None),
        ],
    ),
]


def every_path(test):
    """The test once per tensor path: layout x colour order x depth, normalisation and quantisation."""
    for mark in reversed(EVERY_PATH):
        test = mark(test)
    return test


@every_path
def test_every_tensor_path_gives_the_defined_values(layout, color, dtype, norm, quant):
    """Each shortcut (pixels passed through, one XOR, one shared table, a table per channel, the bare cast) gives
    the values the definition gives, on every pixel value of every channel."""
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (32, 48, 3), dtype=np.uint8)
    image[0, :, :] = np.arange(48 * 3).reshape(48, 3) % 256  # every byte value appears in every channel
    image[1, :, :] = (np.arange(48 * 3).reshape(48, 3) + 144) % 256
    pre = Preprocessing(width=48, height=32, layout=layout, color=color, resize="stretch", mean=norm[0], std=norm[1])
    tensor, _ = Preprocessor(pre, np.dtype(dtype), quant)(image)
    expected = _expected(image, pre, dtype, quant)
    assert tensor.dtype == np.dtype(dtype)
    if np.dtype(dtype).kind == "f":
        np.testing.assert_allclose(tensor[0], expected, rtol=1e-3 if dtype == np.float16 else 1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(tensor[0], expected)


@every_path
def test_every_tensor_path_letterboxes_frames_of_changing_sizes(layout, color, dtype, norm, quant):
    """Only the picture's rectangle is converted per frame; a tensor's padding is converted when it is taken for a
    frame of another size than it last held. Landscape, portrait, landscape again, through two tensors: each is the
    definition applied to the letterboxed frame (resized as cv2.resize does, padded with the pad value)."""
    rng = np.random.default_rng(1)
    pre = Preprocessing(width=40, height=40, layout=layout, color=color, pad_value=114, mean=norm[0], std=norm[1])
    preprocess = Preprocessor(pre, np.dtype(dtype), quant, buffers=2)
    for height, width in [(30, 60), (60, 24), (30, 60), (40, 40)]:
        image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        tensor, t = preprocess(image)
        canvas = np.full((40, 40, 3), 114, np.uint8)
        resized = cv2.resize(image, (t.resized_width, t.resized_height), interpolation=cv2.INTER_LINEAR)
        canvas[t.pad_y : t.pad_y + t.resized_height, t.pad_x : t.pad_x + t.resized_width] = resized
        expected = _expected(canvas, pre, dtype, quant)
        if np.dtype(dtype).kind == "f":
            np.testing.assert_allclose(tensor[0], expected, rtol=1e-3 if dtype == np.float16 else 1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(tensor[0], expected)
