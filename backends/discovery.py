"""Which engines are installed, which devices they see, and the best one for a model file (`--backend auto`)."""

from __future__ import annotations

import ctypes
import importlib.util
from dataclasses import asdict, dataclass, field
from pathlib import Path

from backends.hardware import coral_pcie_devices, coral_usb_devices, nvidia_gpus

INSTALL = {
    "onnx": "pip install onnxruntime (GPU: onnxruntime-gpu in its place; Jetson: JetPack's onnxruntime-gpu wheel)",
    "tflite": "pip install 'edge-inference[tflite]' (ai-edge-litert)",
    "edgetpu": "pip install 'edge-inference[tflite]' and the libedgetpu1-std package from Coral's apt repository",
    "openvino": "pip install 'edge-inference[openvino]'",
}
FORMATS = {
    "onnx": [".onnx"],
    "tflite": [".tflite"],
    "edgetpu": ["_edgetpu.tflite"],
    "openvino": [".xml", ".onnx", ".tflite"],
}


@dataclass
class BackendStatus:
    key: str
    available: bool
    engine: str | None = None
    devices: list[str] = field(default_factory=list)
    problem: str | None = None  # why it cannot run here, with the fix
    install: str = ""
    formats: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def probe_onnx() -> BackendStatus:
    status = BackendStatus("onnx", False, install=INSTALL["onnx"], formats=FORMATS["onnx"])
    if not _installed("onnxruntime"):
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
        status.problem = f"NVIDIA GPU present ({gpus[0]}) but this onnxruntime has no CUDA provider: " + INSTALL["onnx"]
    return status


def probe_tflite() -> BackendStatus:
    status = BackendStatus("tflite", False, install=INSTALL["tflite"], formats=FORMATS["tflite"])
    for module, name in (("ai_edge_litert", "ai-edge-litert"), ("tflite_runtime", "tflite_runtime")):
        if _installed(module):
            status.available, status.engine, status.devices = True, name, ["cpu (XNNPACK)"]
            return status
    status.problem = "LiteRT is not installed"
    return status


def probe_edgetpu() -> BackendStatus:
    from backends.edgetpu_backend import INSTALL_LIBEDGETPU, NO_DEVICE, delegate_library

    status = BackendStatus("edgetpu", False, install=INSTALL["edgetpu"], formats=FORMATS["edgetpu"])
    status.devices = coral_usb_devices() + coral_pcie_devices()
    if not probe_tflite().available:
        status.problem = "LiteRT is not installed (the Edge TPU runs through its delegate)"
        return status
    library = delegate_library()
    try:
        ctypes.CDLL(library)
    except OSError:
        status.problem = f"{library} is not installed: {INSTALL_LIBEDGETPU}"
        return status
    status.engine = f"LiteRT + {Path(library).name}" + (" (pycoral)" if _installed("pycoral") else "")
    status.available = bool(status.devices)
    status.problem = None if status.devices else NO_DEVICE
    return status


def probe_openvino() -> BackendStatus:
    status = BackendStatus("openvino", False, install=INSTALL["openvino"], formats=FORMATS["openvino"])
    if not _installed("openvino"):
        status.problem = "openvino is not installed"
        return status
    from backends.openvino_backend import import_openvino

    ov = import_openvino()
    core = ov.Core()
    status.available, status.engine = True, f"openvino {ov.__version__.split('-')[0]}"
    for device in core.available_devices:
        try:
            name = core.get_property(device, "FULL_DEVICE_NAME")
        except RuntimeError:
            name = device
        status.devices.append(f"{device}  {name}")
    return status


def probe_all() -> list[BackendStatus]:
    return [probe_onnx(), probe_tflite(), probe_edgetpu(), probe_openvino()]


@dataclass(frozen=True)
class Choice:
    backend: str
    device: str
    reason: str


def choose_backend(path: Path, is_edgetpu_model: bool) -> Choice:
    """The fastest engine this machine has for a model file, and why."""
    suffix = path.suffix.lower()
    if is_edgetpu_model:
        return Choice("edgetpu", "auto", "the model is compiled for the Edge TPU")
    if suffix == ".xml":
        return Choice("openvino", "AUTO", "OpenVINO IR model")
    if suffix == ".tflite":
        if probe_tflite().available:
            return Choice("tflite", "cpu", "TFLite model, LiteRT installed")
        return Choice("openvino", "CPU", "TFLite model, LiteRT not installed but OpenVINO is")
    onnx = probe_onnx()
    cuda = next((d.split()[0] for d in onnx.devices if d.startswith("cuda")), None)
    if cuda:
        return Choice("onnx", cuda, "ONNX model, ONNX Runtime has CUDA and a GPU is present")
    if _installed("openvino"):
        accelerators = [d.split()[0] for d in probe_openvino().devices if not d.startswith("CPU")]
        if accelerators:
            return Choice("openvino", accelerators[0], f"ONNX model, OpenVINO sees {accelerators[0]}")
    if onnx.available:
        return Choice("onnx", "cpu", "ONNX model, no GPU or NPU found: ONNX Runtime on the CPU")
    return Choice("openvino", "CPU", "ONNX model, ONNX Runtime not installed but OpenVINO is")
