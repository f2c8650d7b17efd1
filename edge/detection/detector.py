"""One detector: a backend running a described model, with pre-processing and decoding around it."""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from edge_inference.backends import Backend, BackendError
from edge_inference.edge.detection.threads import LoopThreads
from edge_inference.edge.detection.timings import StageTimings
from edge_inference.models.decoders import DecodeContext, get_decoder
from edge_inference.models.decoders.base import dequantize
from edge_inference.models.detection import BoxXYXY, Detection
from edge_inference.models.labels import Classes, class_minimums
from edge_inference.models.preprocess import Preprocessor
from edge_inference.models.spec import ModelSpec
from edge_inference.models.tiles import Layout, Region, RegionBoxes, Tiling, merge_regions, tile_layout
from edge_inference.models.transform import ImageTransform

RECENT = 100  # inferences kept for the live figure shown per stream
_COUNT_LOCK = threading.Lock()
_INFERENCES = [0]  # every detector's inferences in this process: `--backend auto`'s live CPU per frame


def inferences_done() -> int:
    """Inferences run by every detector of this process so far (auto's live check divides CPU time by them)."""
    return _INFERENCES[0]


@dataclass(frozen=True)
class Reporting:
    """What one call reports where it asks for other than the detector's own (an upload's `conf`, `classes`)."""

    conf: float
    iou: float
    max_detections: int
    wanted: Mapping[int, float] | None = None  # class id -> its least score; None: every class from `conf`


def _reporting(least: float, iou: float, max_detections: int, wanted: Mapping[int, float] | None) -> Reporting:
    """The decoder keeps scores from the lowest any reported class takes; the classes' own scores filter after."""
    threshold = min([least, *wanted.values()]) if wanted else least
    return Reporting(threshold, iou, max_detections, wanted)


@dataclass(frozen=True)
class DetectionResult:
    detections: list[Detection]
    timings: StageTimings
    width: int
    height: int
    layout: Layout | None = None  # the regions the frame was run as, where the detector tiles


@dataclass(frozen=True)
class Prepared:
    """A frame turned into the model's input; the tensor is the detector's, held for this frame until inferred."""

    tensor: np.ndarray
    transform: ImageTransform
    preprocess_ms: float
    # a frame run as several regions (tiles, and the whole frame): one row of `tensor` each, with its transform
    regions: tuple[Region, ...] = ()
    transforms: tuple[ImageTransform, ...] = ()
    frame_size: tuple[int, int] = (0, 0)  # the frame's width and height, where it runs as regions

    @property
    def inferences(self) -> int:
        """Model inputs this frame is run as."""
        return max(1, len(self.regions))


def _finite(detection: Detection) -> bool:
    box = detection.box
    return math.isfinite(detection.score + box.x1 + box.y1 + box.x2 + box.y2)  # a NaN or Inf anywhere stays one


def _run_rows(backend: Backend, tensor: np.ndarray) -> tuple[list[np.ndarray], float]:
    """A tensor of one frame's rows (one region each, or the frame alone): as one batch where the engine takes one,
    else row by row, the outputs stacked as a batch would give them; with the engine's milliseconds for all."""
    if tensor.shape[0] == 1 or backend.accepts_batch:
        return backend.run_timed(tensor)
    runs = [backend.run_timed(tensor[row : row + 1]) for row in range(tensor.shape[0])]
    outputs = [np.concatenate([run[0][index] for run in runs]) for index in range(len(runs[0][0]))]
    return outputs, sum(run[1] for run in runs)


class Detector:
    """prepare -> infer -> decode; `detect` runs the three in a row, a pipeline runs them on separate threads."""

    def __init__(
        self,
        backend: Backend,
        spec: ModelSpec,
        *,
        conf: float = 0.25,
        iou: float = 0.45,
        max_detections: int = 100,
        buffers: int = 1,
        classes: Classes | None = None,
        tiling: Tiling | None = None,
    ) -> None:
        self.backend = backend
        self.spec = spec
        self.tiling = tiling  # a big frame run as tiles at the model's scale (models/tiles.py); None: whole
        self._layouts: dict[tuple[int, int], Layout] = {}
        # only these classes are reported (Ultralytics' `classes`, Frigate's `objects.track`), each from its score
        wanted = class_minimums(spec.labels, classes, conf) if classes else None
        self._own = _reporting(conf, iou, max_detections, wanted)
        self._least = conf  # a class named without its own score gets this one
        # `--backend auto` serving on the ranking's choice while the engines are timed: the engine that won instead
        # ("openvino on AUTO"), once another one did
        self.superseded: Callable[[], str | None] = lambda: None
        # a back-to-back loop's engine threads, measured on its frames (threads.py); None: the caller's threads
        self.loop_threads: LoopThreads | None = None
        self.recent_inference_ms: collections.deque[float] = collections.deque(maxlen=RECENT)  # the live figure
        tensor, pre = backend.inputs[0], spec.preprocessing
        if backend.pixels is not None:  # the engine converts BGR pixels itself: hand it the letterboxed frame
            pre = replace(pre, layout="NHWC", color="BGR", mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
        self._preprocess = Preprocessor(pre, tensor.dtype, tensor.quantization, buffers=buffers)
        decoder = get_decoder(spec.decoder)
        self._decode = decoder.decode
        self._output_quant = [o.quantization for o in backend.outputs]
        # a decoder that filters integer scores itself gets the outputs unconverted, with their quantisation
        self._quant_context = tuple(self._output_quant) if decoder.quantized else ()

    def layout(self, width: int, height: int) -> Layout | None:
        """The regions a frame of this size is run as, where the detector tiles; None: the whole frame, as always."""
        if self.tiling is None:
            return None
        layout = self._layouts.get((width, height))
        if layout is None:
            pre = self.spec.preprocessing
            layout = self._layouts[width, height] = tile_layout(width, height, pre.width, pre.height, self.tiling)
        return layout

    def prepare(self, image_bgr: np.ndarray, regions: tuple[Region, ...] | None = None) -> Prepared:
        """The frame as the model's input: whole, as tiles where the detector tiles, or as the `regions` given
        (motion regions: models/regions.py); a lone region of the whole frame is the plain path."""
        t0 = time.perf_counter()
        if regions is None:
            layout = self.layout(image_bgr.shape[1], image_bgr.shape[0])
            regions = layout.regions if layout is not None else None
        if regions and not (len(regions) == 1 and regions[0].whole):
            return self._prepare_regions(image_bgr, regions, t0)
        tensor, transform = self._preprocess(image_bgr)
        return Prepared(tensor, transform, (time.perf_counter() - t0) * 1e3)

    def _prepare_regions(self, image_bgr: np.ndarray, regions: tuple[Region, ...], t0: float) -> Prepared:
        """Each region into a row of one tensor of the frame's own: the rows go to the engine as one batch where it
        takes one, else one by one."""
        batch: np.ndarray | None = None
        transforms = []
        for row, region in enumerate(regions):
            tensor, transform = self._preprocess(region.crop(image_bgr))
            if batch is None:
                batch = np.empty((len(regions), *tensor.shape[1:]), tensor.dtype)
            batch[row] = tensor[0]
            self._preprocess.release(tensor)  # copied out: the slot takes the next region
            transforms.append(transform)
        assert batch is not None
        took_ms = (time.perf_counter() - t0) * 1e3
        size = (image_bgr.shape[1], image_bgr.shape[0])
        return Prepared(batch, transforms[0], took_ms, regions, tuple(transforms), size)

    def infer(self, tensor: np.ndarray, engine: Backend | None = None) -> list[np.ndarray]:
        """The engine's outputs; a tensor from `prepare` may hold another frame once this returns."""
        try:
            return _run_rows(engine or self.backend, tensor)[0]
        finally:
            self._preprocess.release(tensor)

    def infer_timed(self, tensor: np.ndarray) -> tuple[list[np.ndarray], float]:
        """Outputs and inference milliseconds; on a shared engine, the wait for its turn is not inference."""
        try:
            outputs, took = _run_rows(self.backend, tensor)
        finally:
            self._preprocess.release(tensor)
        self.recent_inference_ms.append(took)  # deque appends are atomic: lanes may call this side by side
        with _COUNT_LOCK:
            _INFERENCES[0] += 1
        return outputs, took

    def reporting(
        self,
        conf: float | None = None,
        iou: float | None = None,
        max_detections: int | None = None,
        classes: Classes | None = None,
    ) -> Reporting:
        """The detector's own reporting with what is given replaced; `classes` replaces its classes, and `conf`
        becomes every reported class's least score."""
        own, least = self._own, self._least if conf is None else conf
        wanted = own.wanted
        if classes:
            wanted = class_minimums(self.spec.labels, classes, least)
        elif conf is not None and wanted is not None:
            wanted = dict.fromkeys(wanted, conf)
        iou = own.iou if iou is None else iou
        return _reporting(least, iou, own.max_detections if max_detections is None else max_detections, wanted)

    def decode(
        self, raw: list[np.ndarray], transform: ImageTransform, reporting: Reporting | None = None
    ) -> list[Detection]:
        quant = self._output_quant
        outputs = raw if self._quant_context else [dequantize(o, q) for o, q in zip(raw, quant, strict=True)]
        report = reporting or self._own
        context = DecodeContext(
            self.spec, transform, report.conf, report.iou, report.max_detections, quantization=self._quant_context
        )
        detections = self._decode(outputs, context)
        if not all(_finite(d) for d in detections):
            # NaN or Inf would reach JSON as tokens a browser's JSON.parse refuses, and mean nothing anyway
            raise BackendError(
                f"{self.backend.model_path} gave NaN or Inf for boxes or scores on {self.backend.engine}: a broken "
                "model or conversion (check it with `edge models verify`, or run the float model)"
            )
        wanted = report.wanted
        if wanted is None:
            return detections
        # NMS is per class, so leaving classes out after it keeps the others' boxes as they are
        return [d for d in detections if d.score >= wanted.get(d.class_id, 2.0)]

    def decode_frame(
        self, raw: list[np.ndarray], prepared: Prepared, reporting: Reporting | None = None, *, partial: bool = False
    ) -> list[Detection]:
        """A prepared frame's detections in its pixels: a tiled frame's regions decoded each and merged (`partial`:
        regions that leave parts of the frame out, models/tiles.py `merge_regions`)."""
        if not prepared.regions:
            return self.decode(raw, prepared.transform, reporting)
        report = reporting or self._own
        parts: list[RegionBoxes] = []
        labels: dict[int, str] = {}
        for row, (region, transform) in enumerate(zip(prepared.regions, prepared.transforms, strict=True)):
            found = self.decode([output[row : row + 1] for output in raw], transform, reporting)
            labels.update((d.class_id, d.label) for d in found)
            boxes = np.array([[d.box.x1, d.box.y1, d.box.x2, d.box.y2] for d in found], np.float32).reshape(-1, 4)
            boxes += np.array([region.x, region.y, region.x, region.y], np.float32)
            scores = np.array([d.score for d in found], np.float32)
            parts.append(RegionBoxes(region, boxes, scores, np.array([d.class_id for d in found], np.int64)))
        frame = prepared.frame_size
        # max_detections holds for each region: a 4K crowd is more people than one frame of the model's holds
        cap = report.max_detections * len(parts)
        boxes, scores, class_ids, _ = merge_regions(parts, frame, report.iou, cap, partial=partial)
        return [
            Detection(int(c), labels[int(c)], float(s), BoxXYXY(*(float(v) for v in b)))
            for b, s, c in zip(boxes, scores, class_ids, strict=True)
        ]

    def detect(self, image_bgr: np.ndarray, reporting: Reporting | None = None) -> DetectionResult:
        judge = self.loop_threads
        if judge is None:
            return self._detect(image_bgr, reporting)
        turn = judge.turn()
        self.backend = turn.engine
        wall, cpu = time.perf_counter(), time.process_time()  # the process's CPU: the engine's threads included
        try:
            return self._detect(image_bgr, reporting, turn.engine)
        finally:
            judge.took(turn, time.perf_counter() - wall, time.process_time() - cpu)

    def _detect(
        self, image_bgr: np.ndarray, reporting: Reporting | None = None, engine: Backend | None = None
    ) -> DetectionResult:
        prepared = self.prepare(image_bgr)
        t1 = time.perf_counter()
        raw = self.infer(prepared.tensor, engine)
        t2 = time.perf_counter()
        detections = self.decode_frame(raw, prepared, reporting)
        t3 = time.perf_counter()
        timings = StageTimings(prepared.preprocess_ms, (t2 - t1) * 1e3, (t3 - t2) * 1e3)
        height, width = image_bgr.shape[:2]
        return DetectionResult(detections, timings, width, height, self.layout(width, height))

    def warmup(self) -> None:
        """One inference on a blank frame, so the first real frame does not pay for lazy initialisation."""
        pre = self.spec.preprocessing
        self._detect(np.full((pre.height, pre.width, 3), 114, dtype=np.uint8))  # not a loop's frame: not timed

    @property
    def description(self) -> dict[str, object]:
        return {
            "model": self.spec.name,
            "backend": self.backend.key,
            "engine": self.backend.engine,
            "device": self.backend.device,
            "decoder": self.spec.decoder,
            "input": f"{self.spec.preprocessing.width}x{self.spec.preprocessing.height}",
            "notes": list(self.backend.notes),
        }

    def close(self) -> None:
        if self.loop_threads is not None:
            self.loop_threads.close()
        else:
            self.backend.close()
