"""Where a frame's time went: the detector's three stages, and a pipeline frame's whole path around them."""

from __future__ import annotations

from dataclasses import asdict, dataclass

# a pipeline frame's stages, in the order they happen
STAGES = ("capture", "queue_wait", "preprocess", "inference", "postprocess", "tracking", "end_to_end")


@dataclass(frozen=True, slots=True)
class StageTimings:
    """One `Detector.detect`: pre-processing, inference, decoding; in ms."""

    preprocess_ms: float
    inference_ms: float
    postprocess_ms: float

    @property
    def total_ms(self) -> float:
        return self.preprocess_ms + self.inference_ms + self.postprocess_ms

    def to_dict(self) -> dict[str, float]:
        return {k.removesuffix("_ms"): round(v, 3) for k, v in asdict(self).items()}


@dataclass(frozen=True, slots=True)
class FrameTiming(StageTimings):
    """A frame through a pipeline: its detector stages plus reading it, waiting between threads, and the whole path."""

    captured_at: float  # wall clock, seconds since the epoch
    capture_ms: float
    queue_wait_ms: float  # all time spent waiting between stages
    end_to_end_ms: float  # from the frame being in hand to its result being published
    tracking_ms: float = 0.0  # tracker, zones and lines (0 when the stream does not track)

    def to_dict(self) -> dict[str, float]:
        out = {"captured_at": round(self.captured_at, 6)}
        out.update({f"{stage}_ms": round(getattr(self, f"{stage}_ms"), 3) for stage in STAGES})
        return out
