"""Hailo-8 and Hailo-8L (Raspberry Pi AI Kit and AI HAT+, M.2 cards) through HailoRT's Python API.

`hailo_platform` is not on PyPI: Raspberry Pi OS ships it in `hailo-all`; elsewhere it is Hailo's HailoRT package,
its PCIe driver and the matching `hailort` wheel. Models are `.hef` files compiled for one chip: a Hailo-8 build
does not load on a Hailo-8L and the other way round. Hailo-10H needs HailoRT 5 and hailo10h builds; this engine
targets HailoRT 4 (Hailo-8/8L).

One pattern of HailoRT's, chosen after its own source (pyhailort 4.12-5.2): the model scheduler, which `VDevice()`
enables by default (ROUND_ROBIN since 4.12), with no `activate()` call, as Frigate's hailo8l detector does. Under the
scheduler pyhailort 4.14+ turns `activate()` into a no-op with a deprecation warning on every load, and 4.12/4.13
refuse it ("Manually activating a core-op is not allowed when the core-op scheduler is active!"); the scheduler also
lets several streams and processes share the chip. `engine_options: {hailo: {scheduler: none}}` opts out (then the
network group is activated for this process alone).

What it hands on: an on-chip NMS output (HAILO_NMS_BY_CLASS, or HAILO_NMS as 4.x also names it) as detection rows
(1, N, 6): y_min, x_min, y_max, x_max (0..1 of the input), score, class id, made straight from pyhailort's per-class
[n, 5] arrays; every class the .hef has is kept (labels beyond the label list are named `class_<id>`). The NMS ran on
the chip with the thresholds compiled into the .hef: `--iou` does not apply, and `--conf` only raises the compiled
score threshold. Raw feature maps (1, H, W, C) are handed on as (1, H*W, C). Segmentation (HAILO_NMS_WITH_BYTE_MASK)
and HAILO_NMS_BY_SCORE outputs are refused with a message.
"""

from __future__ import annotations

import contextlib
import re
import threading
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from edge_inference.backends.base import Backend, BackendError, BackendOptions, TensorInfo
from edge_inference.backends.engine import BackendStatus, Engine, Offer, installed
from edge_inference.backends.hardware import hailo_driver_version, hailo_nodes, hailo_pci_devices
from edge_inference.backends.options import EngineOptions, parse_options

INSTALL = (
    "Raspberry Pi OS: `sudo apt install hailo-all` then reboot (driver, firmware, HailoRT and its Python API); other "
    "Linux: HailoRT and its PCIe driver from the Hailo Developer Zone, and the hailort wheel of the same version "
    "(hailo_platform is not on PyPI)"
)
NO_DEVICE = (
    "no Hailo device found. Raspberry Pi 5: seat the AI Kit / AI HAT+ ribbon, enable the PCIe port "
    "(`dtparam=pciex1` in /boot/firmware/config.txt; `dtparam=pciex1_gen=3` for full speed) and reboot; "
    "`lspci` must show 1e60:2864"
)
NO_DRIVER = (
    "a Hailo device is on the PCIe bus ({found}) but /dev/hailo0 is missing: the hailo_pci driver is not loaded. "
    "Install it (`sudo apt install hailo-all`, or hailort-pcie-driver) and reboot; `lsmod | grep hailo` must list it"
)


def runtime_version() -> str | None:
    try:
        return version("hailort")
    except PackageNotFoundError:
        return None


def version_mismatch(driver: str | None, runtime: str | None) -> str | None:
    """HailoRT refuses a driver of another major.minor version; say so before it does, with the fix."""
    if not driver or not runtime:
        return None
    if driver.split(".")[:2] == runtime.split(".")[:2]:
        return None
    return (
        f"the hailo_pci driver is {driver} but HailoRT is {runtime}: they must be the same version. Install both from "
        "one release (`sudo apt install --reinstall hailo-all`, or the matching hailort-pcie-driver) and reboot"
    )


def unsupported_runtime(runtime: str | None) -> str | None:
    """HailoRT 5 is the Hailo-10H's runtime, with another API: not usable here, and said so."""
    if runtime is None or not runtime.split(".")[0].isdigit() or int(runtime.split(".")[0]) < 5:
        return None
    return (
        f"HailoRT {runtime} is HailoRT 5 (Hailo-10H, a different API), which this engine does not run: it targets "
        "HailoRT 4 on a Hailo-8 or Hailo-8L (hailo-all on Raspberry Pi OS bookworm)"
    )


def runtime_problem() -> str | None:
    """What keeps this HailoRT from running here: HailoRT 5, or a driver of another version."""
    return unsupported_runtime(runtime_version()) or version_mismatch(hailo_driver_version(), runtime_version())


_ARCHES = re.compile(r"device arch(?:itecture)?:?\s*(\w+).*?hef arch(?:itecture)?:?\s*(\w+)", re.IGNORECASE | re.DOTALL)


def explain_load_failure(message: str, path: Path) -> str:
    """HailoRT's refusals in words a user can act on (a .hef for the other chip, a driver of another version)."""
    text = message.lower()
    if "not compatible with device" in text or "hef_not_compatible" in text or "invalid_hef" in text:
        arches = _ARCHES.search(message)
        built = f"compiled for {arches.group(2).upper()}" if arches else "compiled for another Hailo chip"
        device = f" and this device is a {arches.group(1).upper()}" if arches else ""
        return (
            f"{path.name} is {built}{device}: a .hef runs only on the chip it was compiled for. Use the build for "
            "this chip (Hailo Model Zoo publishes hailo8 and hailo8l builds of each model), or recompile it"
        )
    if "driver" in text and "version" in text:
        return (
            f"HailoRT and the hailo_pci driver are of different versions ({message.strip()}): install both from one "
            "release (`sudo apt install --reinstall hailo-all`, or the matching hailort-pcie-driver) and reboot"
        )
    return f"HailoRT could not open {path.name}: {message.strip()}"


NMS_ORDERS = ("HAILO_NMS", "HAILO_NMS_BY_CLASS")  # pyhailort's FormatOrder names for per-class detection NMS
REFUSED_ORDERS = {
    "HAILO_NMS_WITH_BYTE_MASK": "instance segmentation (boxes with masks)",
    "HAILO_NMS_BY_SCORE": "NMS sorted by score",
}
ROW_FLOATS = 6  # y_min, x_min, y_max, x_max, score, class id


class HailoOptions(EngineOptions):
    scheduler: Literal["round_robin", "none"] = Field(
        "round_robin",
        description="HailoRT's model scheduler (shares the chip between this service's models and streams); none: "
        "this process activates the model for itself",
    )
    multi_process_service: bool = Field(
        False,
        description="open the chip through HailoRT's multi-process service (hailort_service, started first), so "
        "that other programs (Frigate, picamera2) can use it beside this service",
    )


class SharedVDevice:
    """One VDevice for every .hef this process runs: HailoRT gives the chip to the first VDevice that opens it
    (vdevice.cpp: "there are not enough free devices" for a second, HAILO_OUT_OF_PHYSICAL_DEVICES), and its model
    scheduler is made to serve several network groups on one. Held while any model uses it."""

    _lock = threading.Lock()
    _open: ClassVar[dict[tuple[bool, bool], tuple[Any, int]]] = {}  # (scheduled, service) -> (VDevice, users)

    @classmethod
    def acquire(cls, hp: Any, scheduled: bool, service: bool) -> Any:
        with cls._lock:
            device, users = cls._open.get((scheduled, service), (None, 0))
            if device is None:
                params = hp.VDevice.create_params()
                algorithms = hp.HailoSchedulingAlgorithm
                params.scheduling_algorithm = algorithms.ROUND_ROBIN if scheduled else algorithms.NONE
                if service:
                    params.multi_process_service = True
                device = hp.VDevice(params)
            cls._open[(scheduled, service)] = (device, users + 1)
            return device

    @classmethod
    def release(cls, scheduled: bool, service: bool) -> None:
        with cls._lock:
            device, users = cls._open.get((scheduled, service), (None, 0))
            if device is None:
                return
            if users > 1:
                cls._open[(scheduled, service)] = (device, users - 1)
                return
            del cls._open[(scheduled, service)]
        device.release()


def nms_rows(per_class: list[np.ndarray]) -> np.ndarray:
    """pyhailort's NMS result for one image (one [n, 5] array per class) as rows with their class id."""
    rows = [
        np.column_stack([np.asarray(boxes, np.float32).reshape(-1, 5), np.full(len(boxes), class_id, np.float32)])
        for class_id, boxes in enumerate(per_class)
        if len(boxes)
    ]
    return np.concatenate(rows) if rows else np.empty((0, ROW_FLOATS), np.float32)


def format_order(info: Any) -> str:
    """The FormatOrder's exact name: matched whole, since "NMS" is also in HAILO_NMS_WITH_BYTE_MASK."""
    order = info.format.order
    return str(getattr(order, "name", order)).rpartition(".")[2]


class HailoBackend(Backend):
    def __init__(self, *, runner: Any, stack: contextlib.ExitStack, nms: set[str], **kwargs: Any):
        super().__init__(**kwargs)
        self._runner, self._stack, self._nms = runner, stack, nms
        self._input_name = self.inputs[0].name

    def run(self, tensor: np.ndarray) -> list[np.ndarray]:
        results = self._runner.infer({self._input_name: tensor})
        outputs = []
        for info in self.outputs:
            value = results[info.name]
            if info.name in self._nms:  # a list per image of per-class arrays
                outputs.append(nms_rows(value[0])[None])
            else:
                outputs.append(np.asarray(value).reshape(1, *info.shape[1:]))
        return outputs

    def close(self) -> None:
        self._stack.close()


def require_device() -> None:
    mismatch = runtime_problem()
    if mismatch:
        raise BackendError(mismatch)
    if hailo_nodes():
        return
    pci = hailo_pci_devices()
    raise BackendError(NO_DRIVER.format(found=", ".join(pci)) if pci else NO_DEVICE)


def _describe(hef: Any, path: Path) -> tuple[list[TensorInfo], list[TensorInfo], set[str]]:
    """Inputs, outputs, and the names of the NMS outputs."""
    (vinput,) = hef.get_input_vstream_infos()[:1]
    inputs = [TensorInfo(vinput.name, (1, *tuple(vinput.shape)), np.dtype(np.uint8))]
    outputs, nms = [], set()
    for info in hef.get_output_vstream_infos():
        order = format_order(info)
        if order in REFUSED_ORDERS:
            raise BackendError(
                f"{path.name} ends in {order} ({REFUSED_ORDERS[order]}); this engine reads detection models with "
                "HAILO_NMS_BY_CLASS or raw outputs: use the detection build of the model (Hailo Model Zoo)"
            )
        if order in NMS_ORDERS:
            nms.add(info.name)
            outputs.append(TensorInfo(info.name, (1, -1, ROW_FLOATS), np.dtype(np.float32)))
        else:
            shape = tuple(int(d) for d in info.shape)
            if len(shape) == 3:  # a feature map (H, W, C): its cells in a row, as the per-level decoders read them
                shape = (shape[0] * shape[1], shape[2])
            outputs.append(TensorInfo(info.name, (1, *shape), np.dtype(np.float32)))
    return inputs, outputs, nms


def load(path: Path, options: BackendOptions) -> HailoBackend:
    if not installed("hailo_platform"):
        raise BackendError(f"HailoRT's Python API (hailo_platform) is not installed: {INSTALL}")
    require_device()
    import hailo_platform as hp

    settings = parse_options("hailo", HailoOptions, options.engine_options)
    scheduled, service = settings.scheduler == "round_robin", settings.multi_process_service
    stack = contextlib.ExitStack()
    try:
        hef = hp.HEF(str(path))
        inputs, outputs, nms = _describe(hef, path)
        device = SharedVDevice.acquire(hp, scheduled, service)
        stack.callback(SharedVDevice.release, scheduled, service)
        configure = hp.ConfigureParams.create_from_hef(hef, interface=hp.HailoStreamInterface.PCIe)
        group = device.configure(hef, configure)[0]
        # `quantized` said outright: pyhailort 4.12-4.14 default it to True, and HailoRT then refuses float32
        # outputs ("must be marked as not quantized", transform.cpp); 4.15+ ignore it
        input_params = hp.InputVStreamParams.make(group, quantized=True, format_type=hp.FormatType.UINT8)
        output_params = hp.OutputVStreamParams.make(group, quantized=False, format_type=hp.FormatType.FLOAT32)
        runner = stack.enter_context(hp.InferVStreams(group, input_params, output_params))
        if not scheduled:  # under the scheduler, activate() is refused (4.12/4.13) or a deprecated no-op (4.14+)
            stack.enter_context(group.activate(group.create_params()))
    except BackendError:
        stack.close()
        raise
    except Exception as exc:  # noqa: BLE001 - HailoRT raises its own exception classes for every refusal
        stack.close()
        raise BackendError(explain_load_failure(str(exc), path)) from None
    metadata = {"output_format": "hailo_nms_by_class"} if nms else {}
    return HailoBackend(
        key="hailo",
        model_path=str(path),
        engine=f"hailort {runtime_version() or getattr(hp, '__version__', '?')}",
        device="hailo:0" + ("" if scheduled else " (not scheduled)") + (" via hailort_service" if service else ""),
        inputs=inputs,
        outputs=outputs,
        metadata=metadata,
        runner=runner,
        stack=stack,
        nms=nms,
    )


def probe() -> BackendStatus:
    status = ENGINE.status()
    nodes, pci = hailo_nodes(), hailo_pci_devices()
    status.devices = [f"hailo:{i}  /dev/{node.name}" for i, node in enumerate(nodes)] or pci
    if not installed("hailo_platform"):
        status.problem = "HailoRT's Python API (hailo_platform) is not installed"
        return status
    status.engine = f"hailort {runtime_version() or '?'}"
    mismatch = runtime_problem()
    if mismatch or not nodes:
        status.problem = mismatch or (NO_DRIVER.format(found=", ".join(pci)) if pci else NO_DEVICE)
        return status
    status.available = True
    return status


def rank(path: Path) -> Offer | None:
    if ENGINE.reads(path.name) and installed("hailo_platform") and hailo_nodes():
        return Offer(100, "hailo:0", ".hef model and a Hailo device: it runs on the Hailo")
    return None


ENGINE = Engine(
    key="hailo",
    formats=(".hef",),
    install=INSTALL,
    probe=probe,
    load=load,
    rank=rank,
    listed=40,
    distributions=("hailort",),
    options=HailoOptions,
    # every model opens the one shared VDevice, whatever its device setting says (SharedVDevice)
    chip=lambda device: "vdevice",
)
