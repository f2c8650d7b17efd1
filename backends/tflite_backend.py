"""TensorFlow Lite on the CPU through LiteRT (ai-edge-litert), XNNPACK, with tflite_runtime as a fallback import."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edge_inference.backends.base import (
    Backend,
    BackendError,
    BackendOptions,
    Parallel,
    Quantization,
    TensorInfo,
    brief,
    unreadable_model,
)
from edge_inference.backends.engine import BackendStatus, Engine, Offer, installed
from edge_inference.backends.held_stderr import held_stderr
from edge_inference.extras import install_extra

EDGETPU_OP = "edgetpu-custom-op"


def import_litert(prefer_tflite_runtime: bool = False) -> tuple[Any, Any, str]:
    """(Interpreter class, load_delegate, engine name); LiteRT first, the old tflite_runtime if that is all there is.
    The Edge TPU prefers tflite_runtime where it is installed: libedgetpu builds are paired with one of its versions
    (backends/edgetpu_runtime.py), and nothing else installs it."""
    order = (_tflite_runtime, _litert) if prefer_tflite_runtime else (_litert, _tflite_runtime)
    for runtime in order:
        found = runtime()
        if found is not None:
            return found
    raise BackendError(f"TFLite needs LiteRT: {install_extra('tflite')} (or ai-edge-litert)")


def _litert() -> tuple[Any, Any, str] | None:
    try:
        import ai_edge_litert
        from ai_edge_litert import interpreter as litert
    except ImportError:
        return None
    return litert.Interpreter, litert.load_delegate, f"ai-edge-litert {getattr(ai_edge_litert, '__version__', '')}"


def _tflite_runtime() -> tuple[Any, Any, str] | None:
    try:
        import tflite_runtime
        from tflite_runtime import interpreter as tfl
    except ImportError:
        return None
    return tfl.Interpreter, tfl.load_delegate, f"tflite_runtime {getattr(tflite_runtime, '__version__', '')}"


def _tensor_info(detail: dict[str, Any]) -> TensorInfo:
    scale, zero_point = detail.get("quantization", (0.0, 0))
    quant = Quantization(float(scale), int(zero_point)) if scale else None
    shape = tuple(int(d) for d in detail["shape"])
    return TensorInfo(detail["name"], shape, np.dtype(detail["dtype"]), quant)


def is_edgetpu_model(path: Path) -> bool:
    """Compiled Edge TPU models carry this custom op; a cheap byte scan avoids building an interpreter."""
    try:
        return EDGETPU_OP.encode() in path.read_bytes()
    except OSError:
        return False


XNNPACK_NOTICE = b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n"


@contextlib.contextmanager
def without_xnnpack_notice() -> Iterator[None]:
    """LiteRT's C++ side prints one INFO line on stderr when it applies XNNPACK, and no setting turns it off."""
    with held_stderr(lambda said: said.replace(XNNPACK_NOTICE, b"")):
        yield


def create_interpreter(path: Path, threads: int | None, delegates: list[Any] | None = None) -> tuple[Any, str]:
    interpreter_cls, _, engine = import_litert()
    try:
        interpreter = interpreter_cls(model_path=str(path), num_threads=threads, experimental_delegates=delegates)
    except (ValueError, RuntimeError) as exc:
        detail = brief(str(exc))
        raise unreadable_model(path, "a TFLite", detail) from None
    return interpreter, engine


def allocate(interpreter: Any, path: Path) -> None:
    try:
        with without_xnnpack_notice():  # XNNPACK is applied (and announced) here
            interpreter.allocate_tensors()
    except RuntimeError as exc:
        if EDGETPU_OP in str(exc):
            raise BackendError(
                f"{path.name} is compiled for the Coral Edge TPU; run it with --backend edgetpu, "
                "or use its CPU twin (the same file name without _edgetpu)"
            ) from None
        raise BackendError(
            f"{path.name}: the TFLite interpreter cannot prepare this model: {brief(str(exc))}"
        ) from None


@dataclass
class TFLiteBackend(Backend):
    interpreter: Any = None
    parallel: ClassVar[Parallel] = "copies"  # an interpreter is not thread-safe; another one on the same file is cheap

    def __post_init__(self) -> None:
        self._input_index = self.interpreter.get_input_details()[0]["index"]
        self._output_indices = [d["index"] for d in self.interpreter.get_output_details()]

    def run(self, tensor: np.ndarray) -> list[np.ndarray]:
        self.interpreter.set_tensor(self._input_index, tensor)
        self.interpreter.invoke()
        return [self.interpreter.get_tensor(i) for i in self._output_indices]


def describe(interpreter: Any) -> tuple[list[TensorInfo], list[TensorInfo]]:
    return (
        [_tensor_info(d) for d in interpreter.get_input_details()],
        [_tensor_info(d) for d in interpreter.get_output_details()],
    )


_ELSEWHERE = (
    "for a Coral use backend edgetpu (device usb or pci); for a GPU, backend onnx (device cuda) or openvino "
    "(device GPU) with the model's .onnx"
)


def load(path: Path, options: BackendOptions) -> TFLiteBackend:
    if options.device.lower() not in ("cpu", "auto"):
        raise BackendError(f"the tflite backend runs on the CPU only, not on {options.device!r}: {_ELSEWHERE}")
    interpreter, engine = create_interpreter(path, options.threads)
    allocate(interpreter, path)
    inputs, outputs = describe(interpreter)
    return TFLiteBackend(
        key="tflite",
        model_path=str(path),
        engine=engine,
        device="cpu (XNNPACK)",
        inputs=inputs,
        outputs=outputs,
        interpreter=interpreter,
    )


def probe() -> BackendStatus:
    status = ENGINE.status()
    for module, name in (("ai_edge_litert", "ai-edge-litert"), ("tflite_runtime", "tflite_runtime")):
        if installed(module):
            status.available, status.engine, status.devices = True, name, ["cpu (XNNPACK)"]
            return status
    status.problem = "LiteRT is not installed"
    return status


def rank(path: Path) -> Offer | None:
    if ENGINE.reads(path.name) and probe().available and not is_edgetpu_model(path):
        return Offer(50, "cpu", "TFLite model, LiteRT installed")
    return None


ENGINE = Engine(
    key="tflite",
    formats=(".tflite",),
    excludes=("_edgetpu.tflite",),
    install=f"{install_extra('tflite')} (ai-edge-litert)",
    probe=probe,
    load=load,
    rank=rank,
    listed=1,
    distributions=("ai-edge-litert", "tflite-runtime"),
    cpu_threads=True,
)
