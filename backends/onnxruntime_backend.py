"""ONNX Runtime: CPU, CUDA, TensorRT and OpenVINO execution providers, verified after the session is created."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge_inference.backends.base import Backend, BackendError, BackendOptions, TensorInfo
from edge_inference.backends.engine import BackendStatus, Engine, Offer, installed
from edge_inference.backends.hardware import nvidia_gpus

PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
}
INSTALL_HINTS = {
    "cuda": "install onnxruntime-gpu in place of onnxruntime (pip install 'edge-inference[cuda]') "
    "on a machine with an NVIDIA GPU, CUDA 12 and cuDNN 9",
    "tensorrt": "install onnxruntime-gpu and TensorRT 10 (on a Jetson: JetPack's onnxruntime-gpu wheel)",
    "openvino": "install onnxruntime-openvino in place of onnxruntime",
}
_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
}


def parse_device(device: str) -> tuple[str, int]:
    """'cuda:1' -> ('cuda', 1); 'CPU' -> ('cpu', 0)."""
    name, _, index = device.lower().partition(":")
    name = "cpu" if name == "auto" else name
    if name not in PROVIDERS:
        raise BackendError(f"ONNX Runtime has no device {device!r}; choose one of: {', '.join(PROVIDERS)}")
    if index and not index.isdigit():
        raise BackendError(f"device index in {device!r} must be a number, e.g. cuda:0")
    return name, int(index or 0)


def _tensor_info(arg: Any) -> TensorInfo:
    shape = tuple(d if isinstance(d, int) and d > 0 else -1 for d in arg.shape)
    return TensorInfo(arg.name, shape, np.dtype(_DTYPES.get(arg.type, np.float32)))


@dataclass
class OnnxRuntimeBackend(Backend):
    session: Any = None
    parallel = "shared"  # InferenceSession.run is thread-safe

    def run(self, tensor: np.ndarray) -> list[np.ndarray]:
        result: list[np.ndarray] = self.session.run(None, {self.inputs[0].name: tensor})
        return result


def _providers(ort: Any, name: str, index: int, options: BackendOptions, notes: list[str]) -> list[Any]:
    """The providers to ask for: the wanted one first when this ONNX Runtime has it, else the CPU (if allowed)."""
    wanted = PROVIDERS[name]
    available = ort.get_available_providers()
    if name == "cpu":
        return ["CPUExecutionProvider"]
    if wanted not in available:
        message = (
            f"ONNX Runtime {ort.__version__} here has no {wanted} (available: {', '.join(available)}). "
            f"To use it, {INSTALL_HINTS[name]}"
        )
        if not options.allow_fallback:
            raise BackendError(f"{message}; or pass --fallback to run on the CPU instead.")
        notes.append(f"{wanted} unavailable, running on CPUExecutionProvider (fallback requested)")
        return ["CPUExecutionProvider"]
    provider_options = {"device_id": index} if name in ("cuda", "tensorrt") else {}
    return [(wanted, provider_options), "CPUExecutionProvider"]


def load(path: Path, options: BackendOptions) -> OnnxRuntimeBackend:
    try:
        import onnxruntime as ort
    except ImportError:
        raise BackendError("ONNX Runtime is not installed: pip install onnxruntime") from None

    name, index = parse_device(options.device)
    wanted = PROVIDERS[name]
    notes: list[str] = []
    providers = _providers(ort, name, index, options, notes)
    session_options = ort.SessionOptions()
    session_options.log_severity_level = 3  # the engine's own warnings are not the user's problem
    if options.threads:
        session_options.intra_op_num_threads = options.threads
    try:
        session = ort.InferenceSession(str(path), sess_options=session_options, providers=providers)
    except Exception as exc:  # noqa: BLE001 - ORT raises several private types for unreadable models
        detail = str(exc).splitlines()[0][:300]
        raise BackendError(f"{path} could not be loaded as an ONNX model: {detail}") from None

    active = session.get_providers()[0]
    if name != "cpu" and active != wanted and not notes:
        # ORT silently drops a provider whose libraries fail to load; do not let that pass unnoticed.
        message = f"ONNX Runtime could not start {wanted} (its libraries failed to load) and would run on {active}"
        if not options.allow_fallback:
            raise BackendError(f"{message}. Check the CUDA/cuDNN/TensorRT installation, or pass --fallback.")
        notes.append(f"{message}; running there (fallback requested)")

    meta = session.get_modelmeta()
    return OnnxRuntimeBackend(
        key="onnx",
        model_path=str(path),
        engine=f"onnxruntime {ort.__version__}",
        device=active if name == "cpu" or active != wanted else f"{active}:{index}",
        inputs=[_tensor_info(i) for i in session.get_inputs()],
        outputs=[_tensor_info(o) for o in session.get_outputs()],
        metadata=dict(meta.custom_metadata_map),
        notes=notes,
        session=session,
    )


def probe() -> BackendStatus:
    status = ENGINE.status()
    if not installed("onnxruntime"):
        status.problem = "onnxruntime is not installed"
        return status
    import onnxruntime as ort

    providers = ort.get_available_providers()
    status.available, status.engine = True, f"onnxruntime {ort.__version__}"
    status.devices = ["cpu"]
    gpus = nvidia_gpus()
    if "CUDAExecutionProvider" in providers:
        status.devices += gpus or ["cuda:0"]
    if "TensorrtExecutionProvider" in providers:
        status.devices.append("tensorrt")
    if "OpenVINOExecutionProvider" in providers:
        status.devices.append("openvino")
    if gpus and "CUDAExecutionProvider" not in providers:
        status.problem = f"NVIDIA GPU present ({gpus[0]}) but this onnxruntime has no CUDA provider: {ENGINE.install}"
    return status


def rank(path: Path) -> Offer | None:
    if not ENGINE.reads(path.name) or not installed("onnxruntime"):
        return None
    cuda = next((d.split()[0] for d in probe().devices if d.startswith("cuda")), None)
    if cuda:
        return Offer(90, cuda, "ONNX model, ONNX Runtime has CUDA and a GPU is present")
    return Offer(50, "cpu", "ONNX model, no GPU or NPU found: ONNX Runtime on the CPU")


ENGINE = Engine(
    key="onnx",
    formats=(".onnx",),
    install="pip install onnxruntime (GPU: onnxruntime-gpu in its place; Jetson: JetPack's onnxruntime-gpu wheel)",
    probe=probe,
    load=load,
    rank=rank,
    listed=0,
    distributions=("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino"),
)
