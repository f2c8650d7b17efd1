"""Frames that change size on the way through a stream: every published result is what `edge detect` gives on that
frame, whatever the sequence of sizes, the lanes and the engine.

A folder of six photos of different sizes, looping on two lanes, came back empty for most passes: a change of size
repainted the padding of every input tensor, those still queued or in the engine included, and a file's frames on
several lanes could reuse a tensor an engine still read. Cameras change size too (an RTSP camera renegotiating, a
snapshot camera's day and night profiles). The checks here: the tensors' own bookkeeping under random interleavings
of prepare and release, and random sequences of frame sizes through real pipelines on every engine that runs here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import cv2
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from edge_inference.edge.config import ServiceConfig, StreamConfig
from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.detector_pool import DetectorPool
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.runtime.streams import StreamManager
from edge_inference.edge.stream.drawing import render_jpeg, shrunk
from edge_inference.edge.stream.pipeline import StreamPipeline
from edge_inference.edge.stream.sources import open_source
from edge_inference.models.detection import Detection
from edge_inference.models.preprocess import Preprocessor, TensorSlots
from edge_inference.models.spec import Preprocessing
from tests.conftest import MEDIA, MODELS, VTEST, skimage_photo
from tests.test_watchdogs import wait_for

NANODET = MODELS / "onnx/nanodet_m.onnx"
SSD_ONNX = MODELS / "onnx/ssd_mobilenet_v2_coco_quant_postprocess.onnx"
SSD_TFLITE = MODELS / "tflite/ssd_mobilenet_v2_coco_quant_postprocess.tflite"

# Each engine that runs here, on models whose inputs take different pre-processing paths: a float NCHW table
# (NanoDet on ONNX Runtime), raw uint8 pixels resized straight into the tensor (SSD on ONNX Runtime and LiteRT), and
# BGR pixels for OpenVINO's own compiled pre-processing (NanoDet on OpenVINO).
ENGINES = {
    "onnx-nanodet": ("onnx", NANODET),
    "onnx-ssd": ("onnx", SSD_ONNX),
    "openvino-nanodet": ("openvino", NANODET),
    "tflite-ssd": ("tflite", SSD_TFLITE),
}


def _photos() -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(VTEST))
    frame = capture.read()[1]
    capture.release()
    pictures = [skimage_photo(name) for name in ("astronaut", "chelsea", "coffee")]
    return [*pictures, cv2.imread(str(MEDIA / "cat_720p.jpg")), cv2.imread(str(MEDIA / "kite_and_cold.jpg")), frame]


PHOTOS = _photos()


def assert_same_detections(got: list[Detection], expected: list[Detection], what: str) -> None:
    """The same objects, boxes within a pixel and scores within 0.01: lanes and thread counts may add a float's
    rounding, never another object. A corrupted input gives empty results or other objects."""
    assert [d.label for d in got] == [d.label for d in expected], what
    for mine, theirs in zip(got, expected, strict=True):
        assert abs(mine.score - theirs.score) < 0.01, what
        assert np.allclose(mine.box.as_list(3), theirs.box.as_list(3), atol=1.0), what


# -- the tensors' bookkeeping ------------------------------------------------------------------------------------


def _letterboxed(image: np.ndarray, pre: Preprocessing) -> np.ndarray:
    """The definition, computed alone: a fresh pre-processor's tensor for this one image."""
    return Preprocessor(pre, np.dtype(np.uint8), None)(image)[0].copy()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(st.sampled_from([(30, 60), (60, 24), (40, 40), (17, 33)]), st.integers(0, 3), st.booleans()),
        min_size=1,
        max_size=24,
    ),
    layout=st.sampled_from(["NHWC", "NCHW"]),
)
def test_a_tensor_in_flight_keeps_its_frame_whatever_comes_after(steps, layout):
    """Frames of random sizes are prepared while up to four earlier ones are still held (queued, or in an engine),
    and released in a random order: every tensor still held equals the definition for its own frame, every time."""
    pre = Preprocessing(width=40, height=40, layout=layout, color="RGB", pad_value=114)
    preprocess = Preprocessor(pre, np.dtype(np.uint8), None, buffers=5)
    rng = np.random.default_rng(len(steps))
    held: list[tuple[np.ndarray, np.ndarray]] = []  # (tensor, what it must hold)
    for (height, width), release_index, release_first in steps:
        if held and (release_first or len(held) >= 4):
            tensor, _ = held.pop(release_index % len(held))
            preprocess.release(tensor)
        image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        tensor, _ = preprocess(image)
        held.append((tensor, _letterboxed(image, pre)))
        for kept, expected in held:
            np.testing.assert_array_equal(kept, expected)


def test_tensors_are_shared_out_only_while_free():
    """A released tensor is taken again before a new one is made; one held is never handed out twice while fewer
    than twice the expected number are held."""
    slots = TensorSlots(lambda: np.zeros(4), expected=2)
    first, second = slots.take("a", lambda t: None), slots.take("a", lambda t: None)
    third = slots.take("a", lambda t: None)  # a caller that counted short: a margin, not a reused tensor
    assert len({id(first), id(second), id(third)}) == 3
    slots.release(second)
    assert slots.take("a", lambda t: None) is second
    assert slots.count == 3
    painted: list[object] = []
    slots.release(first)
    slots.take("b", painted.append)  # another size: the tensor taken is repainted, and only it
    assert painted == [first]


# -- real pipelines on real engines --------------------------------------------------------------------------------


class _Engines:
    """One detector pool per engine and lane count, each engine loaded once for the module and held open."""

    def __init__(self) -> None:
        self._pools: dict[tuple[str, int], tuple[DetectorPool, Detector]] = {}
        self.references: dict[str, Detector] = {}
        self._lock = threading.Lock()

    def loader(self, name: str, lanes: int):
        engine, model = ENGINES[name]
        config = DetectorConfig(str(model), backend=engine, device="cpu", threads=1, back_to_back=False)
        with self._lock:
            if (name, lanes) not in self._pools:
                pool = DetectorPool()
                opener = pool.opener("holder", 30.0, lanes)
                self._pools[name, lanes] = (pool, load_detector(config, opener=opener))
            pool = self._pools[name, lanes][0]

        def load(buffers: int) -> Detector:
            return load_detector(
                DetectorConfig(str(model), backend=engine, device="cpu", threads=1, buffers=buffers),
                opener=pool.opener("stream", 30.0, lanes),
            )

        return load

    def reference(self, name: str) -> Detector:
        """What `edge detect` runs: the model loaded on its own, one frame at a time."""
        engine, model = ENGINES[name]
        if name not in self.references:
            self.references[name] = load_detector(DetectorConfig(str(model), backend=engine, device="cpu"))
        return self.references[name]

    def close(self) -> None:
        for _, holder in self._pools.values():
            holder.close()
        for detector in self.references.values():
            detector.close()


@pytest.fixture(scope="module")
def engines():
    held = _Engines()
    yield held
    held.close()


def _frame(photo: int, width: int, height: int) -> np.ndarray:
    """A real photo at another size: stretched or squeezed as a camera's other profile would give it."""
    return cv2.resize(PHOTOS[photo], (width, height), interpolation=cv2.INTER_AREA)


frame_sizes = st.lists(
    st.tuples(st.integers(0, len(PHOTOS) - 1), st.integers(96, 800), st.integers(96, 640)), min_size=2, max_size=8
)


@pytest.mark.parametrize("name", sorted(ENGINES))
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(frames=frame_sizes, lanes=st.integers(1, 3))
def test_every_published_result_is_edge_detects_on_that_frame(engines, tmp_path_factory, name, frames, lanes):
    """Random sequences of photos at random sizes, played as a folder through a stream on 1-3 lanes of a shared
    engine: each published result equals the engine's answer for that frame alone."""
    folder = tmp_path_factory.mktemp("sizes")
    images = [_frame(*frame) for frame in frames]
    for index, image in enumerate(images):
        cv2.imwrite(str(folder / f"{index:03d}.png"), image)  # lossless: the stream reads these very pixels
    reference = engines.reference(name)
    expected = [reference.detect(image).detections for image in images]
    pipeline = StreamPipeline("sizes", open_source(str(folder)), engines.loader(name, lanes), pace=False, lanes=lanes)
    published: list[tuple[int, int, list[Detection]]] = []
    pipeline.add_listener(lambda result: published.append((result.index, result.width, result.detections)))
    pipeline.start()
    try:
        wait_for(lambda: pipeline.state == "ended", "the folder played to its end")
    finally:
        pipeline.stop()
    assert [(index, width) for index, width, _ in published] == [(i, image.shape[1]) for i, image in enumerate(images)]
    for index, _, detections in published:
        what = f"{name}, {lanes} lanes, frame {index} of {[(w, h) for _, w, h in frames]}"
        assert_same_detections(detections, expected[index], what)


# -- the service, against the `edge detect` command ----------------------------------------------------------------


def _from_json(record: dict) -> list[tuple[str, float, list[float]]]:
    return [(d["label"], d["score"], d["box"]) for d in record["detections"]]


@pytest.mark.process
@pytest.mark.parametrize("engine", ["onnx", "openvino"])
def test_a_looping_folder_of_photos_of_six_sizes_gives_what_edge_detect_gives(tmp_path: Path, engine: str):
    """The reported case: `edge serve --source FOLDER --loop` on six photos of different sizes, NanoDet, a lane per
    core on the shared engine. Every pass of every photo gives what the `edge detect` command prints for it."""
    for index, photo in enumerate(PHOTOS):
        cv2.imwrite(str(tmp_path / f"{index}.png"), photo)
    command = [sys.executable, "-m", "edge_inference", "detect", str(tmp_path), "--json"]
    printed = subprocess.run(
        [*command, "-m", str(NANODET), "-b", engine, "-d", "cpu"], capture_output=True, text=True, timeout=240
    )
    assert printed.returncode == 0, printed.stderr
    expected = {Path(r["source"]).name: _from_json(r) for r in map(json.loads, printed.stdout.splitlines())}
    assert len(expected) == len(PHOTOS) and all(expected.values())
    names = sorted(expected)

    stream = StreamConfig(
        id="photos", source=str(tmp_path), model=str(NANODET), backend=engine, device="cpu", pace=False, loop=True
    )
    manager = StreamManager(ServiceConfig(streams=[stream]))
    published: list[tuple[int, list[tuple[str, float, list[float]]]]] = []
    pipeline = manager.pipelines["photos"]
    pipeline.add_listener(
        lambda r: published.append((r.index, [(d.label, d.score, d.box.as_list(3)) for d in r.detections]))
    )
    manager.start()
    try:
        wait_for(lambda: len(published) >= 3 * len(PHOTOS), "three passes over the folder")
    finally:
        manager.stop()
    for index, detections in published:
        want = expected[names[index % len(names)]]
        assert [label for label, _, _ in detections] == [label for label, _, _ in want], (index, detections)
        for (_, score, box), (_, want_score, want_box) in zip(detections, want, strict=True):
            assert abs(score - want_score) < 0.01 and np.allclose(box, want_box, atol=1.0), (index, detections)


def test_prepared_frames_of_a_new_size_leave_the_engines_tensor_alone():
    """The engine's tensor for the frame it runs stays as prepared while the next frames, of other sizes, are
    prepared: the repaint of a size change touches only the tensor being filled."""
    detector = load_detector(DetectorConfig(str(NANODET), backend="onnx", device="cpu", buffers=4))
    in_engine = detector.prepare(PHOTOS[0]).tensor
    kept = in_engine.copy()
    for photo in PHOTOS[1:4]:
        detector.prepare(photo)
    np.testing.assert_array_equal(in_engine, kept)
    detector.close()


_CAPTURE = cv2.VideoCapture(str(VTEST))
_WALKWAY = _CAPTURE.read()[1]
_CAPTURE.release()


@settings(max_examples=60, deadline=None)
@given(height=st.integers(120, 1080), aspect=st.floats(0.75, 2.4), shown=st.integers(16, 720))
@example(height=120, aspect=1.5, shown=73)  # 180 * (73 / 120) is 109.49999...: the JPEG came out a pixel narrow
def test_a_thumbnail_of_any_frame_size_is_the_size_asked_and_looks_as_an_area_average_would(height, aspect, shown):
    """The dashboards' thumbnails and a sized MJPEG are shrunk by a whole-factor average and an interpolation the
    rest of the way (issue 62: 0.24 against 2.25 ms for INTER_AREA at 2.4x): whatever the camera's size (a 160x120
    sub-stream to 1080p, portrait 3:4 to 21:9) and the height asked (the API's 16 and up), the picture is the one
    asked for and within a few grey levels of OpenCV's area average on a real frame (4.8 at worst in 6,000 random
    draws, at thumbnails about 20 pixels high)."""
    width = min(1920, max(16, round(height * aspect)))
    frame = cv2.resize(_WALKWAY, (width, height), interpolation=cv2.INTER_LINEAR)  # a camera of that size
    target = (max(1, round(width * shown / height)), shown)
    assume(shown < height and target[0] <= width)  # render_jpeg only ever shrinks
    small = shrunk(frame, *target)
    assert small.shape == (shown, target[0], 3)
    area = cv2.resize(frame, target, interpolation=cv2.INTER_AREA)
    assert float(np.abs(small.astype(np.float32) - area).mean()) <= 6.0
    jpeg = render_jpeg(frame, [], height=shown, quality=70, boxes=True)
    assert cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR).shape == small.shape
