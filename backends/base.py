"""The one small interface every inference engine implements.

A backend loads a model file for a device, describes its tensors, runs one input and says what actually ran it.
It knows nothing of YOLO, SSD or HTTP.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

Parallel = Literal["shared", "copies", "none"]


class BackendError(RuntimeError):
    """A failure the user can act on; the message says what to do."""


class BackendRefused(BackendError):
    """A load refused before it started, as what is installed is known not to work (a runtime pair that crashes):
    trying again cannot help until the installation changes."""


BRIEF_LIMIT = 600  # characters: the longest advice we write (the Edge TPU runtime's install) fits whole


def brief(text: str, limit: int = BRIEF_LIMIT) -> str:
    """A message for one line: its first line, whole where it fits; a longer one (an engine's own multi-kilobyte
    error) ends at the last clause that fits, marked as cut, never in the middle of a word or a sentence (but for
    a first word longer than the limit: it is cut, having no boundary to end at)."""
    line = text.strip().split("\n", 1)[0].strip()
    if len(line) <= limit:
        return line
    head = line[: limit - len(" (...)")]
    cut = max(head.rfind(mark) for mark in ("; ", ". ", ": ", ", "))
    return (head[:cut] if cut > limit // 3 else head.rsplit(" ", 1)[0]).rstrip(" ,;:.") + " (...)"


def unreadable_model(path: Path, kind: str, detail: str) -> BackendError:
    """An engine could not parse the file: cut short by a copy or download, or not a model of this kind."""
    return BackendError(
        f"{path} could not be loaded as {kind} model ({detail}): the file is damaged, incomplete or not {kind} model;"
        " copy, download or export it again"
    )


class EngineOptions(BaseModel):
    """An engine's own settings (backends/options.py): an engine without any has this; engines with some subclass
    it, with a description per field."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class Quantization:
    """real = scale * (q - zero_point)"""

    scale: float
    zero_point: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # -1 where the dimension is dynamic
    dtype: np.dtype
    quantization: Quantization | None = None


@dataclass(frozen=True)
class PixelSteps:
    """Pre-processing an engine may compile into the model: it is then handed BGR uint8 pixels, NHWC, at its input's
    size, and converts them itself (depth, channel order, mean and scale, layout)."""

    reverse_channels: bool  # the model wants RGB
    mean: tuple[float, float, float]  # in the model's channel order
    std: tuple[float, float, float]


@dataclass(frozen=True)
class Description:
    """What a model file declares, read without preparing it to run (for engines that can: OpenVINO)."""

    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BackendOptions:
    device: str = "auto"  # each engine's own default: CUDA where it starts, else the CPU, for ONNX Runtime; the CPU
    # for TFLite; AUTO for OpenVINO
    threads: int | None = None
    # Run elsewhere (the CPU) when the asked-for device is missing, and say so, instead of failing.
    allow_fallback: bool = False
    # (width, height) for engines whose files do not declare their input size (RKNN); from the sidecar or flags
    input_size: tuple[int, int] | None = None
    # This engine's own block of `engine_options`: typed by its options model where the config or the loader parsed
    # it (backends/options.py), a mapping from a caller of its own (parsed at load then)
    engine_options: Mapping[str, Any] | EngineOptions = field(default_factory=dict)
    # Where an engine may keep what it builds from a model (TensorRT engines and timing caches); None: nowhere
    cache_dir: Path | None = None
    # Inferences that will run at once on this loaded model (streams sharing it): OpenVINO compiles that many
    # parallel streams
    lanes: int = 1
    # Pre-processing to compile into the model where the engine can (OpenVINO's PrePostProcessor)
    pixels: PixelSteps | None = None
    # auto: a process of its own for accelerators and plugins, this one for the CPU engines (backends/isolation.py);
    # process or thread: as said
    isolation: str = "auto"
    # An engine in a process of its own that has not loaded the model by then is killed, and the load retried with
    # the keeper's backoff: a driver that hangs on a device would otherwise hold the stream in `loading` for ever.
    # Generous, as a TensorRT engine's first build on a Jetson takes minutes.
    load_deadline_s: float = 900.0


@dataclass
class Backend(ABC):
    """A loaded model on one engine and device."""

    key: str
    model_path: str
    engine: str  # engine and version, e.g. "onnxruntime 1.31.1"
    device: str  # what actually runs it, e.g. "CPUExecutionProvider"
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    metadata: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # e.g. "CUDA unavailable, fell back to CPU"
    pixels: PixelSteps | None = None  # set when the engine took the pre-processing: its input is BGR uint8 pixels
    # How inferences may run at once (several streams on one engine): "shared": `run` may be called from several
    # threads on this one loaded model; "copies": load the model again for each; "none": one at a time (a device).
    parallel: ClassVar[Parallel] = "none"

    @abstractmethod
    def run(self, tensor: np.ndarray) -> list[np.ndarray]:
        """Run one input; returns outputs in the order of `outputs`, raw (still quantised if the tensor is)."""

    def run_timed(self, tensor: np.ndarray) -> tuple[list[np.ndarray], float]:
        """Outputs and the engine's own milliseconds (a shared engine leaves out the wait for its turn)."""
        t0 = time.perf_counter()
        outputs = self.run(tensor)
        return outputs, (time.perf_counter() - t0) * 1e3

    @property
    def lanes(self) -> int:
        """Inferences that may run at once through this handle (a shared engine's lanes; one otherwise)."""
        return 1

    @property
    def accepts_batch(self) -> bool:
        """The model's batch dimension is dynamic on its input and every output: inputs can run as one batch."""
        return bool(self.inputs) and all(t.shape[:1] == (-1,) for t in [self.inputs[0], *self.outputs])

    def run_batch(self, tensors: list[np.ndarray]) -> list[list[np.ndarray]]:
        """Several inputs (a frame's batch of one, or of its tiles): as one batch where the model accepts it, else one
        by one; each input's outputs are its own rows of the batch's."""
        if len(tensors) == 1 or not self.accepts_batch:
            return [self.run(tensor) for tensor in tensors]
        outputs = self.run(np.concatenate(tensors))
        ends = np.cumsum([tensor.shape[0] for tensor in tensors])
        return [[output[end - t.shape[0] : end] for output in outputs] for t, end in zip(tensors, ends, strict=True)]

    def timing_split(self) -> dict[str, float] | None:
        """Where an inference's time went beyond this machine (a server's network, queue and compute), in ms; None
        for an engine that runs here."""
        return None

    def abandon(self, why: str) -> bool:
        """Stop an engine stuck in an inference, where it can be stopped (a process of its own is killed; a thread
        cannot be): True when the stuck call will return, raising `why`."""
        return False

    def close(self) -> None:  # noqa: B027 - engines without explicit resources need nothing here
        """Release the engine's resources."""
