"""Intel OpenVINO: ONNX, TFLite and IR (.xml/.bin) models on CPU, GPU, NPU or AUTO.

MYRIAD (Neural Compute Stick 2) left OpenVINO after 2022.3 LTS; it is used only where such a runtime is installed.
"""

from __future__ import annotations

import glob
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from edge_inference.backends.base import (
    Backend,
    BackendError,
    BackendOptions,
    Description,
    PixelSteps,
    Quantization,
    TensorInfo,
)
from edge_inference.backends.engine import BackendStatus, Engine, Offer, installed
from edge_inference.backends.hardware import intel_accelerators
from edge_inference.backends.openvino_model import batch_of_one
from edge_inference.backends.openvino_precision import (
    compare,
    decided,
    precision_key,
    quantised,
    remember,
    remembered,
    said,
)
from edge_inference.backends.options import EngineOptions, parse_options
from edge_inference.extras import install_extra

DEVICES = ("CPU", "GPU", "NPU", "AUTO", "MYRIAD")
DEVICE_HINTS = {
    "GPU": "an Intel integrated or Arc GPU with its compute runtime (apt install intel-opencl-icd, or Intel's "
    "compute-runtime packages), and this user in the 'render' group",
    "NPU": "an Intel Core Ultra NPU with the Intel NPU driver (linux-npu-driver) and access to /dev/accel/accel0",
}
MYRIAD_HELP = (
    "MYRIAD (Intel Neural Compute Stick 2) was removed after OpenVINO 2022.3 LTS; this runtime is OpenVINO {version} "
    "with devices {devices}. To use an NCS2, install openvino==2022.3.* (Python 3.7-3.10) in its own environment with "
    "the Movidius udev rules; edge uses MYRIAD automatically when such a runtime lists it. Otherwise choose CPU, GPU, "
    "NPU or AUTO."
)


class OpenVINOOptions(EngineOptions):
    performance_hint: Literal["LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT"] = Field(
        "LATENCY",
        description="OpenVINO's PERFORMANCE_HINT: LATENCY (one frame at a time, each soon) or THROUGHPUT (many "
        "requests at once, for streams sharing the model)",
    )
    preprocess: Literal["auto", "engine", "host"] = Field(
        "auto",
        description="where the frame becomes the model's input: engine (OpenVINO's PrePostProcessor, compiled into "
        "the model: the device gets uint8 pixels, a quarter of the float bytes) or host (our own, in numpy and "
        "OpenCV). auto: engine on GPU and NPU, host on CPU and AUTO (measured on a CPU: the engine's 3% more CPU)",
    )
    precision: Literal["auto", "f32", "f16", "bf16"] = Field(
        "auto",
        description="OpenVINO's INFERENCE_PRECISION_HINT on the CPU: auto is the CPU's default (f16 on ARM, such "
        "as a Raspberry Pi; bf16 with AVX-512 BF16 or AMX; f32 on other x86), or f32 where that default is timed "
        "against f32 once and costs more (kept per CPU and model); f32 gives x86's scores on ARM, at some speed",
    )


def import_openvino() -> Any:
    """The runtime module with `Core` and `__version__`; 2022.3 LTS (the last with MYRIAD) keeps them elsewhere."""
    try:
        import openvino as ov
    except ImportError:
        raise BackendError(f"OpenVINO is not installed: {install_extra('openvino')}") from None
    if hasattr(ov, "Core"):
        return ov
    from openvino import runtime as legacy  # OpenVINO <= 2022.3

    if not hasattr(legacy, "__version__"):
        legacy.__version__ = legacy.get_version()
    return legacy


def available_devices(ov: Any) -> list[str]:
    devices: list[str] = ov.Core().available_devices
    return devices


def check_device(requested: str, devices: list[str], version: str) -> str:
    """The device to compile for, or a message that says why it cannot be used."""
    name = requested.upper()
    base = name.split(".")[0].split(":")[0]
    if base not in DEVICES:
        raise BackendError(f"OpenVINO has no device {requested!r}; choose one of: CPU, GPU, NPU, AUTO")
    if base == "AUTO":
        return name
    if base == "MYRIAD" and not any(d.startswith("MYRIAD") for d in devices):
        raise BackendError(MYRIAD_HELP.format(version=version, devices=", ".join(devices)))
    if not any(d == name or d.startswith(base) for d in devices):
        hint = DEVICE_HINTS.get(base, "the device and its driver")
        raise BackendError(
            f"OpenVINO {version} sees no {base} here (devices: {', '.join(devices)}). {base} needs {hint}; "
            "or use --device CPU (or AUTO)"
        )
    return name


def _tflite_quantization(path: Path) -> tuple[list[Quantization | None], list[Quantization | None]]:
    """OpenVINO keeps int8 TFLite I/O but not its scales; read them from the file with LiteRT when it is there."""
    from edge_inference.backends.tflite_backend import create_interpreter

    try:
        interpreter, _ = create_interpreter(path, None)
    except BackendError:
        return [], []
    scales = [
        [
            Quantization(float(d["quantization"][0]), int(d["quantization"][1])) if d["quantization"][0] else None
            for d in details
        ]
        for details in (interpreter.get_input_details(), interpreter.get_output_details())
    ]
    return scales[0], scales[1]


def _tensor_info(port: Any, quant: Quantization | None) -> TensorInfo:
    shape = tuple(d.get_length() if d.is_static else -1 for d in port.get_partial_shape())
    return TensorInfo(port.get_any_name(), shape, np.dtype(port.get_element_type().to_dtype()), quant)


@dataclass
class OpenVINOBackend(Backend):
    compiled: Any = None
    parallel = "shared"  # one compiled model, an infer request per calling thread

    def __post_init__(self) -> None:
        self._requests = threading.local()
        self._outputs = list(self.compiled.outputs)

    def run(self, tensor: np.ndarray) -> list[np.ndarray]:
        request = getattr(self._requests, "request", None)
        if request is None:
            request = self._requests.request = self.compiled.create_infer_request()
        results = request.infer({0: tensor})
        return [results[port] for port in self._outputs]  # copies: safe while the next frame runs


def compile_config(device: str, hint: str, threads: int | None, lanes: int, precision: str = "auto") -> dict[str, Any]:
    """OpenVINO's properties for the thread budget: `threads` per lane, and a CPU stream per lane (parallel
    requests; with the LATENCY hint alone the lanes would queue on one stream). On AUTO they go to the CPU in
    DEVICE_PROPERTIES, and the hint with them: a hint given to AUTO itself overrides the CPU's stream count."""
    cpu: dict[str, Any] = {"PERFORMANCE_HINT": hint}
    if precision != "auto":
        cpu["INFERENCE_PRECISION_HINT"] = precision  # AUTO refuses it for itself: CPU only
    if threads:
        cpu["INFERENCE_NUM_THREADS"] = threads * max(1, lanes)  # OpenVINO's count covers all of its streams
    if lanes > 1 and hint == "LATENCY":  # THROUGHPUT chooses its own streams
        cpu["NUM_STREAMS"] = lanes
    base = device.split(":")[0].split(".")[0]
    if base == "CPU":
        return cpu
    if base == "AUTO" and len(cpu) > 1:
        return {"DEVICE_PROPERTIES": {"CPU": cpu}}
    return {"PERFORMANCE_HINT": hint}


OPENVINO_CACHE = "openvino"  # compiled GPU/NPU blobs, under the model cache


def cache_config(device: str, available: list[str], cache_dir: Path | None) -> dict[str, Any]:
    """OpenVINO's model cache for the devices that compile for a long time (a GPU's kernels, an NPU's blob: seconds
    to a minute at every start without it); OpenVINO keys its blobs by the model and the device's settings. The
    CPU compiles in moments and keeps nothing on disk."""
    base = device.split(":")[0].split(".")[0]
    accelerators = [d for d in available if d.split(".")[0] in ("GPU", "NPU")]
    compiles_long = base in ("GPU", "NPU") or (base in ("AUTO", "MULTI", "HETERO") and bool(accelerators))
    if cache_dir is None or not compiles_long:
        return {}
    return {"CACHE_DIR": str(cache_dir / OPENVINO_CACHE)}


def _read(core: Any, path: Path) -> Any:
    weights = path.with_suffix(".bin")
    if path.suffix.lower() == ".xml" and not weights.is_file():  # OpenVINO's own words: "Check 'm_weights_provider'"
        raise BackendError(f"OpenVINO's IR {path.name} needs its weights {weights.name} beside it: copy both files")
    try:
        model = core.read_model(str(path))
    except RuntimeError as exc:
        text = str(exc)
        if "No translator found for" in text:
            op = text.split("No translator found for", 1)[1].split()[0]
            raise BackendError(
                f"OpenVINO cannot read {path.name}: its TFLite reader does not support the {op} operation; "
                "run the model with --backend tflite, or give OpenVINO an ONNX conversion of it"
            ) from None
        detail = " ".join(line for line in text.splitlines() if "failed" in line.lower() or "Unable" in line)
        raise BackendError(
            f"OpenVINO cannot read {path.name} ({detail[:300] or text[:300]}): the file is damaged, incomplete or not"
            " a model OpenVINO reads (IR .xml with its .bin, ONNX, TFLite); copy, download or export it again"
        ) from None
    return batch_of_one(model)


def _tensors(compiled: Any, path: Path) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """Inputs and outputs, with the quantisation OpenVINO does not report read from a TFLite file itself."""
    in_quant, out_quant = _tflite_quantization(path) if path.suffix.lower() == ".tflite" else ([], [])
    inputs = [_tensor_info(p, in_quant[i] if i < len(in_quant) else None) for i, p in enumerate(compiled.inputs)]
    outputs = [_tensor_info(p, out_quant[i] if i < len(out_quant) else None) for i, p in enumerate(compiled.outputs)]
    if any(t.dtype.kind in "iu" and t.quantization is None for t in inputs + outputs) and path.suffix == ".tflite":
        raise BackendError(
            f"{path.name} has integer inputs/outputs whose scales OpenVINO does not report; install ai-edge-litert "
            "so they can be read from the file, or run it with --backend tflite"
        )
    return inputs, outputs


def describe(path: Path, options: BackendOptions) -> Description | None:
    """The model's tensors, read without compiling it (a fraction of the compile's time), when the engine is to
    take the pre-processing; None otherwise (nothing read twice)."""
    settings = parse_options("openvino", OpenVINOOptions, options.engine_options)
    if not takes_pixels(settings.preprocess, options.device):
        return None
    ov = import_openvino()
    inputs, outputs = _tensors(_read(ov.Core(), path), path)
    return Description(inputs, outputs)


def with_pixels(ov: Any, model: Any, steps: PixelSteps) -> Any | None:
    """The model behind OpenVINO's PrePostProcessor, taking BGR uint8 pixels NHWC and doing the depth, channel
    order, mean, scale and layout itself (compiled into the model, where the CPU plugin fuses them into its first
    layers); None for a model whose input is not one float image of 3 channels."""
    if len(model.inputs) != 1 or not model.inputs[0].get_partial_shape().is_static:
        return None
    port = model.inputs[0]
    shape = [d.get_length() for d in port.get_partial_shape()]
    layout = "NCHW" if len(shape) == 4 and shape[1] == 3 else "NHWC" if len(shape) == 4 and shape[3] == 3 else None
    if layout is None or shape[0] != 1 or port.get_element_type().to_dtype().kind != "f":
        return None
    from openvino.preprocess import PrePostProcessor

    ppp = PrePostProcessor(model)
    ppp.input().tensor().set_element_type(ov.Type.u8).set_layout(ov.Layout("NHWC"))
    ppp.input().model().set_layout(ov.Layout(layout))
    preprocess = ppp.input().preprocess().convert_element_type(ov.Type.f32)
    if steps.reverse_channels:
        preprocess.reverse_channels()
    if any(steps.mean):
        preprocess.mean(list(steps.mean))
    if any(v != 1 for v in steps.std):
        preprocess.scale(list(steps.std))
    return ppp.build()


def takes_pixels(setting: str, device: str) -> bool:
    """Whether the pre-processing goes into the model: asked for, or by default on a GPU or NPU (the upload is a
    quarter of the bytes and the conversion runs there). On a CPU our own pre-processing cost less: the engine's
    whole detect took 2.8-3.4% more CPU a frame with it (benchmarks.overhead (d))."""
    if setting != "auto":
        return setting == "engine"
    return device.split(":")[0].split(".")[0].upper() in ("GPU", "NPU")


def load(path: Path, options: BackendOptions) -> OpenVINOBackend:
    ov = import_openvino()
    core = ov.Core()
    version = ov.__version__.split("-")[0]
    device = check_device(options.device, core.available_devices, version)
    model = _read(core, path)
    settings = parse_options("openvino", OpenVINOOptions, options.engine_options)
    converted = with_pixels(ov, model, options.pixels) if options.pixels is not None else None
    pixels = None if converted is None else options.pixels  # asked for (`describe` decided) and the model fits
    model = model if converted is None else converted
    config = compile_config(device, settings.performance_hint, options.threads, options.lanes, settings.precision)
    config |= cache_config(device, list(core.available_devices), options.cache_dir)
    compiled = _compiled(core, model, device, config, path)
    notes: list[str] = []
    if settings.precision == "auto" and device == "CPU":
        key = precision_key(core, path, version, options.threads)
        compiled, choice = _cheaper_precision(core, model, config, path, compiled, key, options.cache_dir)
        notes += [said(choice)] if choice is not None and choice["precision"] == "f32" else []
    inputs, outputs = _tensors(compiled, path)
    actual = device
    if device.startswith("AUTO"):
        actual = f"AUTO ({', '.join(compiled.get_property('EXECUTION_DEVICES'))})"
    return OpenVINOBackend(
        key="openvino",
        model_path=str(path),
        engine=f"openvino {version}",
        device=actual,
        inputs=inputs,
        outputs=outputs,
        compiled=compiled,
        pixels=pixels,
        notes=notes,
    )


def _compiled(core: Any, model: Any, device: str, config: dict[str, Any], path: Path) -> Any:
    try:
        return core.compile_model(model, device, config)
    except RuntimeError as exc:
        raise BackendError(
            f"OpenVINO cannot compile {path.name} for {device}: {str(exc).splitlines()[-1][:300]}"
        ) from None


def _cheaper_precision(
    core: Any, model: Any, config: dict[str, Any], path: Path, compiled: Any, key: str, cache_dir: Path | None
) -> tuple[Any, dict[str, Any] | None]:
    """The CPU's default precision, or f32 where the default is not f32 and f32 costs clearly less CPU here:
    remembered per CPU and model, else measured now (openvino_precision.py)."""
    default = str(compiled.get_property("INFERENCE_PRECISION_HINT")).lower().removeprefix("<type: '").rstrip("'>")
    if default in ("f32", "float32") or cache_dir is None or quantised(model):  # nothing to choose, or not worth it
        return compiled, None
    choice = remembered(cache_dir, key)
    f32 = None
    if choice is None:
        f32 = _compiled(core, model, "CPU", config | {"INFERENCE_PRECISION_HINT": "f32"}, path)
        measured = compare(compiled, f32)
        if measured is None:
            return compiled, None
        choice = decided(measured, default)
        remember(cache_dir, key, choice)
    if choice["precision"] != "f32":
        return compiled, choice
    return f32 or _compiled(core, model, "CPU", config | {"INFERENCE_PRECISION_HINT": "f32"}, path), choice


def probe() -> BackendStatus:
    status = ENGINE.status()
    if not installed("openvino"):
        status.problem = "openvino is not installed"
        return status
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


def rank(path: Path) -> Offer | None:
    name = path.name.lower()
    if not ENGINE.reads(name) or not installed("openvino"):
        return None
    if name.endswith(".xml"):
        return Offer(90, "AUTO", "OpenVINO IR model")
    if name.endswith(".onnx") and intel_accelerators():  # OpenVINO is imported only where it may find one
        accelerators = [d.split()[0] for d in probe().devices if not d.startswith("CPU")]
        if accelerators:
            return Offer(80, accelerators[0], f"ONNX model, OpenVINO sees {accelerators[0]}")
    return Offer(10, "CPU", f"{path.suffix[1:].upper()} model: OpenVINO on the CPU reads it")


def off_cpu(device: str) -> bool:
    """OpenVINO's AUTO may choose a GPU or NPU where one is present (a render node, an accel node)."""
    if device.upper() in ("AUTO", ""):
        return bool(glob.glob("/dev/dri/renderD*") or glob.glob("/dev/accel/accel*"))
    return device.upper() != "CPU"


ENGINE = Engine(
    key="openvino",
    formats=(".xml", ".onnx", ".tflite"),
    excludes=("_edgetpu.tflite",),
    install=install_extra("openvino"),
    probe=probe,
    load=load,
    rank=rank,
    listed=3,
    distributions=("openvino",),
    options=OpenVINOOptions,
    describe=describe,
    cpu_threads=True,
    off_cpu=off_cpu,
)
