"""One detector: a backend running a described model, with pre-processing and decoding around it."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from backends import Backend
from edge.timings import StageTimings
from models.decoders import DecodeContext, get_decoder
from models.detection import Detection
from models.preprocess import InputQuantization, Preprocessor
from models.spec import ModelSpec


@dataclass(frozen=True)
class DetectionResult:
    detections: list[Detection]
    timings: StageTimings
    width: int
    height: int


class Detector:
    def __init__(
        self, backend: Backend, spec: ModelSpec, *, conf: float = 0.25, iou: float = 0.45, max_detections: int = 100
    ) -> None:
        self.backend = backend
        self.spec = spec
        self.conf, self.iou, self.max_detections = conf, iou, max_detections
        tensor = backend.inputs[0]
        quant = tensor.quantization
        self._preprocess = Preprocessor(
            spec.preprocessing, tensor.dtype, InputQuantization(quant.scale, quant.zero_point) if quant else None
        )
        self._decode = get_decoder(spec.decoder).decode
        self._output_quant = [o.quantization for o in backend.outputs]

    def detect(self, image_bgr: np.ndarray) -> DetectionResult:
        t0 = time.perf_counter()
        tensor, transform = self._preprocess(image_bgr)
        t1 = time.perf_counter()
        raw = self.backend.run(tensor)
        t2 = time.perf_counter()
        outputs = [self._dequantize(o, q) for o, q in zip(raw, self._output_quant, strict=True)]
        ctx = DecodeContext(self.spec, transform, self.conf, self.iou, self.max_detections)
        detections = self._decode(outputs, ctx)
        t3 = time.perf_counter()
        timings = StageTimings((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3)
        height, width = image_bgr.shape[:2]
        return DetectionResult(detections, timings, width, height)

    @staticmethod
    def _dequantize(output: np.ndarray, quant: object) -> np.ndarray:
        if quant is None or not np.issubdtype(output.dtype, np.integer):
            return output
        scale, zero_point = quant.scale, quant.zero_point  # type: ignore[attr-defined]
        return (output.astype(np.float32) - zero_point) * np.float32(scale)

    def warmup(self) -> None:
        """One inference on a blank frame, so the first real frame does not pay for lazy initialisation."""
        pre = self.spec.preprocessing
        self.detect(np.full((pre.height, pre.width, 3), 114, dtype=np.uint8))

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
        self.backend.close()
