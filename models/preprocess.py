"""Image -> input tensor. One resize, one colour swap, one fused affine; buffers reused between frames."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Protocol

import cv2
import numpy as np

from edge_inference.models.spec import Preprocessing
from edge_inference.models.transform import ImageTransform


class Quantization(Protocol):
    """The input tensor's affine quantisation, real = scale * (q - zero_point), as the engine describes it
    (`backends.Quantization` is one; models only need its two numbers, and never import an engine)."""

    @property
    def scale(self) -> float: ...

    @property
    def zero_point(self) -> int: ...


_INTEGER_RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}
# Depths written straight into the tensor; others (float16) are computed in a float32 scratch first.
_DIRECT_DTYPES = {np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.float32)}
_BYTES = np.arange(256, dtype=np.uint8)


def opencv_threads_off() -> None:
    """OpenCV's own thread pool off (unless OPENCV_FOR_THREADS_NUM says otherwise). Its workers spin-wait after
    every call: on 2 cores a 0.04 ms colour swap cost 0.35 ms of CPU and a resize 25% more CPU than on one thread
    (BENCHMARKS.md). The frame's other stages and the engine use the other cores better."""
    if "OPENCV_FOR_THREADS_NUM" not in os.environ:
        cv2.setNumThreads(1)


def affine_terms(pre: Preprocessing, dtype: np.dtype, quantization: Quantization | None) -> tuple[np.ndarray, ...]:
    """(a, b) per channel such that the model's input value is pixel * a + b: normalisation and quantisation."""
    mean = np.asarray(pre.mean, dtype=np.float64)
    std = np.asarray(pre.std, dtype=np.float64)
    a, b = 1.0 / std, -mean / std
    if dtype not in _INTEGER_RANGES:
        return a, b
    if quantization is None or quantization.scale == 0:
        # An integer input with no quantisation takes raw pixels; its normalisation is inside the graph.
        return np.ones(3), np.zeros(3)
    return a / quantization.scale, b / quantization.scale + quantization.zero_point


class Preprocessor:
    """Turns BGR uint8 images into the model's input tensor.

    Normalisation and input quantisation are folded into one per-channel affine ``x * a + b``; when that
    affine is the identity on uint8 data (raw-pixel models, most quantised SSDs) the resized pixels are
    handed over without any arithmetic.
    """

    def __init__(
        self, pre: Preprocessing, dtype: np.dtype, quantization: Quantization | None, buffers: int = 1
    ) -> None:
        opencv_threads_off()
        self.pre = pre
        self.dtype = np.dtype(dtype)
        self._canvas = np.full((pre.height, pre.width, 3), pre.pad_value, dtype=np.uint8)
        a, b = affine_terms(pre, self.dtype, quantization)
        self._passthrough = self.dtype == np.uint8 and bool(
            np.all(np.abs(a - 1.0) * 255 < 1.0) and np.all(np.abs(b) < 0.5)
        )
        shape = (1, 3, pre.height, pre.width) if pre.layout == "NCHW" else (1, pre.height, pre.width, 3)
        # Output tensors a pipeline keeps in flight: it prepares frame N+1 while the engine still reads frame N.
        self._slots = TensorSlots(lambda: np.empty(shape, dtype=self.dtype), max(1, buffers))
        self._scratch = None if self.dtype in _DIRECT_DTYPES else np.empty(shape[1:], dtype=np.float32)
        self._a = a.astype(np.float32)
        self._b = b.astype(np.float32)
        self._has_offset = bool(np.any(self._b != 0))
        self._identity = bool(np.all(self._a == 1)) and not self._has_offset
        # Pixels are uint8, so normalisation + quantisation is a 256-entry table per channel: one pass, any depth.
        # The exception is a float NCHW input that only needs the cast (YOLOX's raw 0..255): a split and a cast of
        # each contiguous plane beats three tables. With a scale the table stays: exact to the definition, and in
        # the detect loop as quick as a multiply of each plane (yolov8n at 640, BENCHMARKS.md).
        planar_cast = pre.layout == "NCHW" and self._identity
        uses_table = self.dtype in _DIRECT_DTYPES and not (self.dtype == np.float32 and planar_cast)
        self._lut = self._table(a, b) if uses_table else None
        self._plane_luts = [] if self._lut is None else [np.ascontiguousarray(self._lut[:, c]) for c in range(3)]
        self._shared_lut, self._xor = self._shortcuts()
        self._weighted = self._vectorised(float(a[0]), float(b[0]))
        self._last_size: tuple[int, int] | None = None
        self._transform: ImageTransform | None = None
        self._swap = pre.color == "RGB"
        self._split_into: list[np.ndarray] = []  # planes reused: a split into new arrays costs twice the CPU
        # Bytes in the canvas's own layout (raw pixels, or int8 as a flip of each byte's top bit) are resized
        # straight into the tensor and finished there: the canvas only holds the padding (the SSD's raw pixels at
        # 300x300: 0.72-0.73 against 0.74-0.78 ms a frame in the detect loop; int8 yolov8n at 640: no change).
        self._in_tensor = pre.layout == "NHWC" and (self._passthrough or self._xor is not None)

    def __call__(self, image_bgr: np.ndarray) -> tuple[np.ndarray, ImageTransform]:
        """The image as the model's input, in a tensor no other frame in flight holds (until `release`).
        Called from one thread at a time (the canvas is shared); `release` may come from any thread."""
        height, width = image_bgr.shape[:2]
        if self._last_size != (width, height) or self._transform is None:
            self._transform = ImageTransform.fit(width, height, self.pre)
            self._last_size = (width, height)
            self._canvas[:] = self.pre.pad_value  # the old picture's rectangle is padding at the new size
        t = self._transform
        tensor = self._slots.take((width, height), self._pad)
        rows, cols = slice(t.pad_y, t.pad_y + t.resized_height), slice(t.pad_x, t.pad_x + t.resized_width)
        # Resized straight into the letterbox canvas (or the tensor): no intermediate image, no copy.
        roi = (tensor[0].view(np.uint8) if self._in_tensor else self._canvas)[rows, cols]
        _into(roi, cv2.resize(image_bgr, (t.resized_width, t.resized_height), dst=roi, interpolation=cv2.INTER_LINEAR))
        if self._swap and self.pre.layout == "NHWC":
            cv2.cvtColor(roi, cv2.COLOR_BGR2RGB, dst=roi)  # planar (NCHW) layouts swap for free, by plane order
        if not self._in_tensor:
            self._convert(rows, cols, tensor)  # the picture only: the tensor holds this size's padding already
        elif self._xor is not None:
            np.bitwise_xor(roi, self._xor, out=roi)
        return tensor, t

    def release(self, tensor: np.ndarray) -> None:
        """The engine is done with a tensor this returned: it may hold another frame."""
        self._slots.release(tensor)

    def _pad(self, tensor: np.ndarray) -> None:
        """A tensor about to hold a frame of another size than it last held: the canvas's padding into all of it
        (the picture's rectangle is written over next). Only this tensor: others may be in the engine."""
        self._convert(slice(None), slice(None), tensor)

    def _region(self, array: np.ndarray, rows: slice, cols: slice) -> np.ndarray:
        """The rectangle of an image-shaped array (the tensor, the scratch) in the model's layout."""
        return array[:, rows, cols] if self.pre.layout == "NCHW" else array[rows, cols]

    def _convert(self, rows: slice, cols: slice, tensor: np.ndarray) -> None:
        """The canvas's rectangle into the same rectangle of `tensor`: the model's depth, layout and values."""
        src, dst = self._canvas[rows, cols], self._region(tensor[0], rows, cols)
        if self._passthrough:
            dst[...] = (src[..., ::-1] if self._swap else src).transpose(2, 0, 1) if self.pre.layout == "NCHW" else src
        elif self._xor is not None:
            np.bitwise_xor(src, self._xor, out=dst.view(np.uint8))
        elif self._weighted is not None:
            self._apply_weighted(src, dst.view(np.uint8))
        elif self._lut is not None:
            self._apply_table(src, dst)
        else:
            work = dst if self._scratch is None else self._region(self._scratch, rows, cols)
            self._affine(src, work)
            if work is not dst:
                dst[...] = work  # float32 scratch -> the model's float depth

    def _table(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        values = np.arange(256, dtype=np.float64)[:, None] * a[None, :] + b[None, :]  # (256, channels)
        if self.dtype in _INTEGER_RANGES:
            values = np.clip(np.rint(values), *_INTEGER_RANGES[self.dtype])
        return np.ascontiguousarray(values.astype(self.dtype))

    def _shortcuts(self) -> tuple[np.ndarray | None, np.uint8 | None]:
        """One table for all channels, when they agree: OpenCV applies a one-channel table 2.5x faster than a
        three-channel one. And a table that only flips bits (an int8 input with scale 1/255 and zero point -128:
        q = pixel - 128 is the pixel's byte with its top bit flipped) as one XOR, 25x cheaper than the table."""
        tables = self._plane_luts
        if not tables or not all(np.array_equal(t, tables[0]) for t in tables):
            return None, None
        shared = tables[0]
        if self.dtype not in _INTEGER_RANGES or self.pre.layout != "NHWC":
            return shared, None
        mask = shared.view(np.uint8)[0]
        if not np.array_equal(shared.view(np.uint8), _BYTES ^ mask):
            return shared, None
        return shared, mask

    def _vectorised(self, a: float, b: float) -> tuple[float, float] | None:
        """The shared integer table as OpenCV's vectorised `pixel * alpha + gamma` (rounded, saturated to 0..255;
        an int8 table computed as uint8 with 128 added, its top bit flipped after): half the CPU of the table lookup
        (0.14 against 0.29 ms a 640x480 frame). Only where it gives all 256 entries exactly, through both of
        OpenCV's code paths (a long row runs its vector loop, a row of one byte its scalar tail)."""
        if self._shared_lut is None or self._xor is not None or self.dtype not in _INTEGER_RANGES:
            return None
        # planar tensors take a plane at a time; raw pixels (within half a step of the table) are handed over as is
        if self.pre.layout != "NHWC" or self._passthrough:
            return None
        weighted = (a, b + (128.0 if self.dtype == np.int8 else 0.0))
        wanted = self._shared_lut.view(np.uint8) ^ np.uint8(0x80 if self.dtype == np.int8 else 0)
        long_row = _BYTES.reshape(1, 256)
        one_byte_rows = np.zeros((256, 16), np.uint8)[:, :1]
        one_byte_rows[:, 0] = _BYTES
        for values in (long_row, one_byte_rows):
            got = cv2.addWeighted(values, weighted[0], values, 0.0, weighted[1])
            if not np.array_equal(got.reshape(-1), wanted):
                return None
        return weighted

    def _apply_weighted(self, src: np.ndarray, dst: np.ndarray) -> None:
        assert self._weighted is not None
        alpha, gamma = self._weighted
        _into(dst, cv2.addWeighted(src, alpha, src, 0.0, gamma, dst=dst))
        if self.dtype == np.int8:
            np.bitwise_xor(dst, np.uint8(0x80), out=dst)

    def _apply_table(self, src: np.ndarray, dst: np.ndarray) -> None:
        assert self._lut is not None
        if self.pre.layout == "NCHW":
            for index, plane in enumerate(self._planes(src)):
                _into(dst[index], cv2.LUT(plane, self._plane_luts[index], dst=dst[index]))
        elif self._shared_lut is not None:
            _into(dst, cv2.LUT(src, self._shared_lut, dst=dst))
        else:
            _into(dst, cv2.LUT(src, self._lut.reshape(1, 256, 3), dst=dst))

    def _planes(self, hwc: np.ndarray) -> list[np.ndarray]:
        """The canvas's planes in the model's channel order (BGR split, reversed for RGB models)."""
        if not self._split_into or self._split_into[0].shape != hwc.shape[:2]:
            self._split_into = [np.empty(hwc.shape[:2], dtype=np.uint8) for _ in range(3)]
        planes = list(cv2.split(hwc, self._split_into))
        return planes[::-1] if self._swap else planes

    def _affine(self, hwc: np.ndarray, work: np.ndarray) -> None:
        """work = hwc * a + b per channel, in the model's layout."""
        if self.pre.layout == "NCHW":
            # Contiguous planes from cv2.split are faster to cast and scale than a strided transpose (YOLOX at 416:
            # 0.10 against 0.31 ms for the cast alone).
            for index, plane in enumerate(self._planes(hwc)):
                if self._identity:
                    np.copyto(work[index], plane, casting="unsafe")
                    continue
                np.multiply(plane, self._a[index], out=work[index])
                if self._has_offset:
                    work[index] += self._b[index]
            return
        np.multiply(hwc, self._a, out=work)
        if self._has_offset:
            work += self._b


class TensorSlots:
    """The input tensors of frames in flight. A tensor is handed out only while no frame holds it: from `take` to
    `release` it is the caller's (a file's frames wait in a queue and run on several lanes, so the one prepared next
    may not reuse the one an engine still reads). Each remembers the frame size its padding was painted for, so a
    change of size repaints only the tensor about to be filled. Past `expected` tensors held at once (a caller that
    never releases: a benchmark's prepare loop) up to twice as many are made, a margin for a caller that counted
    short; past that the one taken longest ago is reused, as a fixed ring would."""

    def __init__(self, make: Callable[[], np.ndarray], expected: int) -> None:
        self._make = make
        self._expected = expected
        self._lock = threading.Lock()  # take and release come from different threads; held for list work only
        self._free: list[np.ndarray] = []
        self._held: dict[int, np.ndarray] = {}  # id -> tensor, in the order taken
        self._painted: dict[int, object] = {}  # id -> the frame size its padding is for

    def take(self, size: object, paint: Callable[[np.ndarray], None]) -> np.ndarray:
        with self._lock:
            if self._free:
                tensor = self._free.pop()
            elif len(self._held) < 2 * self._expected:
                tensor = self._make()
            else:  # every expected tensor is held and none was released: reuse the oldest
                tensor = self._held.pop(next(iter(self._held)))
            self._held[id(tensor)] = tensor
            fresh = self._painted.get(id(tensor)) != size
            self._painted[id(tensor)] = size
        if fresh:
            paint(tensor)  # outside the lock: this tensor is held by no one else now
        return tensor

    def release(self, tensor: np.ndarray) -> None:
        with self._lock:
            if self._held.pop(id(tensor), None) is not None:
                self._free.append(tensor)

    @property
    def count(self) -> int:
        """Tensors made so far."""
        with self._lock:
            return len(self._held) + len(self._free)


def _into(dst: np.ndarray, result: np.ndarray) -> None:
    """OpenCV writes into a strided view it can map; where it could not, it returned a new array: copy that in."""
    if result is not dst:
        dst[...] = result
