"""A stand-in for HailoRT's Python API (`hailo_platform`), for the tests only: never installed with the package.

It copies pyhailort as read in hailo-ai/hailort (hailort/libhailort/bindings/python/platform/hailo_platform/
pyhailort/pyhailort.py and hailort/libhailort/src/hailort_defaults.cpp) at the version in `__version__`:
- `VDevice()` with default params enables the model scheduler: `VDeviceParams.default()` sets
  HAILO_SCHEDULING_ALGORITHM_ROUND_ROBIN (hailort_defaults.cpp, 4.12 onwards).
- `ConfiguredNetwork.activate()` under the scheduler: 4.14+ logs "Calls to `activate()` when working with scheduler
  are deprecated! ..." on the `pyhailort` logger and returns an empty context manager; 4.12/4.13 refuse it
  (vdevice_core_op.cpp: "Manually activating a core-op is not allowed when the core-op scheduler is active!").
- Without the scheduler, inference before `activate()` fails (HAILO_NETWORK_GROUP_NOT_ACTIVATED).
- `InferVStreams.infer` returns NMS outputs (HAILO_NMS_BY_CLASS, float32) the way
  `HailoRTTransformUtils.output_raw_buffer_to_nms_format` does: a list per frame of one [n, 5] array per class
  (y_min, x_min, y_max, x_max, score).

The "device" runs a .hef that the tests write with `write_hef`: JSON naming the input, the outputs with their format
order, and the boxes each class returns. Anything else is refused as HailoRT refuses a file that is no HEF.
"""

from __future__ import annotations

import contextlib
import json
import logging
from enum import Enum
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

__version__ = "4.20.0"
BBOX_PARAMS = 5
CALLS: list[str] = []  # what was called, in order, for the tests to read


class HailoRTException(Exception):
    pass


class HailoSchedulingAlgorithm(Enum):
    NONE = 0
    ROUND_ROBIN = 1


class FormatType(Enum):
    AUTO = 0
    UINT8 = 1
    UINT16 = 2
    FLOAT32 = 3


class FormatOrder(Enum):
    NHWC = 1
    NHCW = 2
    NC = 5
    HAILO_NMS = 8  # 4.x's older name of HAILO_NMS_BY_CLASS
    HAILO_NMS_WITH_BYTE_MASK = 20
    HAILO_NMS_BY_CLASS = 22
    HAILO_NMS_BY_SCORE = 23


class HailoStreamInterface(Enum):
    PCIe = 0
    INTEGRATED = 1
    ETH = 2
    MIPI = 3


def _version() -> tuple[int, int]:
    major, minor, *_ = __version__.split(".")
    return int(major), int(minor)


def write_hef(path: Path, outputs: list[dict[str, Any]], detections: dict[int, list[list[float]]], size: int = 640):
    """A .hef for this stand-in: outputs [{"name", "order", "classes"}], boxes per class id."""
    hef = {"input": {"name": "yolov8n/input_layer1", "shape": [size, size, 3]}, "outputs": outputs}
    hef["detections"] = {str(k): v for k, v in detections.items()}
    path.write_text(json.dumps(hef))
    return path


class HEF:
    def __init__(self, hef_source: str):
        try:
            self._hef = json.loads(Path(hef_source).read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            raise HailoRTException(f"Failed to create HEF from {hef_source}, status = HAILO_INVALID_HEF(26)") from None

    def get_input_vstream_infos(self, network_name: str | None = None) -> list[Any]:
        spec = self._hef["input"]
        fmt = SimpleNamespace(order=FormatOrder.NHWC, type=FormatType.UINT8)
        return [SimpleNamespace(name=spec["name"], shape=tuple(spec["shape"]), format=fmt)]

    def get_output_vstream_infos(self, network_name: str | None = None) -> list[Any]:
        infos = []
        for spec in self._hef["outputs"]:
            fmt = SimpleNamespace(order=FormatOrder[spec["order"]], type=FormatType.FLOAT32)
            nms = SimpleNamespace(number_of_classes=spec.get("classes", 80), max_bboxes_per_class=100)
            infos.append(
                SimpleNamespace(name=spec["name"], shape=tuple(spec.get("shape", ())), format=fmt, nms_shape=nms)
            )
        return infos


class VDeviceParams(SimpleNamespace):
    @staticmethod
    def default() -> VDeviceParams:
        return VDeviceParams(scheduling_algorithm=HailoSchedulingAlgorithm.ROUND_ROBIN, device_count=1)


class ConfigureParams:
    @staticmethod
    def create_from_hef(hef: HEF, interface: HailoStreamInterface) -> dict[str, Any]:
        return {"yolov8n": SimpleNamespace(interface=interface)}


class _VStreamParams:
    @staticmethod
    def make(
        configured_network: ConfiguredNetwork,
        quantized: bool | None = None,
        format_type: FormatType | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        # 4.12-4.14: `quantized=True` unless told (pyhailort.py); 4.15+ ignore it (format type alone decides)
        if _version() < (4, 15):
            quantized = True if quantized is None else quantized
        else:
            quantized = format_type != FormatType.FLOAT32
        return {"format_type": format_type, "quantized": quantized}


class InputVStreamParams(_VStreamParams):
    pass


class OutputVStreamParams(_VStreamParams):
    pass


class ConfiguredNetwork:
    def __init__(self, hef: HEF, scheduled: bool):
        self._hef, self._scheduled, self.active = hef, scheduled, False
        self.name = "yolov8n"

    def is_scheduled(self) -> bool:
        return self._scheduled

    @staticmethod
    def create_params() -> SimpleNamespace:
        return SimpleNamespace(batch_size=1)

    def activate(self, network_group_params: Any = None) -> contextlib.AbstractContextManager[Any]:
        CALLS.append("activate")
        if self._scheduled:
            if _version() < (4, 14):
                raise HailoRTException(
                    "Manually activating a core-op is not allowed when the core-op scheduler is active! "
                    "status = HAILO_INVALID_OPERATION(6)"
                )
            logging.getLogger("pyhailort").warning(
                "Calls to `activate()` when working with scheduler are deprecated! On future versions this call "
                "will raise an error."
            )
            return contextlib.nullcontext()
        return self._activated()

    @contextlib.contextmanager
    def _activated(self) -> Any:
        self.active = True
        try:
            yield self
        finally:
            self.active = False

    def get_input_vstream_infos(self, network_name: str | None = None) -> list[Any]:
        return self._hef.get_input_vstream_infos()

    def get_output_vstream_infos(self, network_name: str | None = None) -> list[Any]:
        return self._hef.get_output_vstream_infos()


OPEN_VDEVICES: list[VDevice] = []  # the chip is given to the first VDevice that opens it (hailo_pci's mark_as_used)


class VDevice:
    def __init__(self, params: VDeviceParams | None = None, *, device_ids: list[str] | None = None):
        self._params = params or VDevice.create_params()
        self.released = False
        through_service = getattr(self._params, "multi_process_service", False)
        if not through_service and any(not getattr(d._params, "multi_process_service", False) for d in OPEN_VDEVICES):
            # vdevice.cpp, VDeviceBase::create_devices (4.20)
            raise HailoRTException(
                "Failed to create vdevice. there are not enough free devices. requested: 1, found: 0. "
                "status = HAILO_OUT_OF_PHYSICAL_DEVICES(74)"
            )
        OPEN_VDEVICES.append(self)
        CALLS.append(f"VDevice({self._params.scheduling_algorithm.name})")

    @staticmethod
    def create_params() -> VDeviceParams:
        return VDeviceParams.default()

    def configure(self, hef: HEF, configure_params_by_name: dict[str, Any] | None = None) -> list[ConfiguredNetwork]:
        scheduled = self._params.scheduling_algorithm != HailoSchedulingAlgorithm.NONE
        return [ConfiguredNetwork(hef, scheduled)]

    def release(self) -> None:
        self.released = True
        if self in OPEN_VDEVICES:
            OPEN_VDEVICES.remove(self)
        CALLS.append("release")

    def __enter__(self) -> VDevice:
        return self

    def __exit__(self, *args: Any) -> bool:
        self.release()
        return False


class InferVStreams:
    def __init__(self, configured_net_group: ConfiguredNetwork, input_params: Any, output_params: Any, **_: Any):
        self._group, self._input_params, self._output_params = configured_net_group, input_params, output_params
        if output_params.get("quantized") and output_params.get("format_type") == FormatType.FLOAT32:
            # 4.12-4.14: transform.cpp's check on an output's user format (its device side is uint8)
            raise HailoRTException(
                "dst-data-type (HAILO_FORMAT_TYPE_FLOAT32) is bigger than src-data-type (HAILO_FORMAT_TYPE_UINT8), "
                "and must be marked as not quantized. status = HAILO_INVALID_ARGUMENT(2)"
            )

    def __enter__(self) -> InferVStreams:
        return self

    def __exit__(self, *args: Any) -> bool:
        return False

    def infer(self, input_data: dict[str, np.ndarray]) -> dict[str, Any]:
        if not self._group.is_scheduled() and not self._group.active:
            raise HailoRTException("Network group is not activated. status = HAILO_NETWORK_GROUP_NOT_ACTIVATED(69)")
        for name, array in input_data.items():  # _validate_input_data_format_type (4.20)
            if array.dtype.itemsize != 1:
                raise HailoRTException(f"{name} numpy array item size is {array.dtype.itemsize}, not 1")
        (frames,) = {len(array) for array in input_data.values()}
        hef = self._group._hef._hef
        results: dict[str, Any] = {}
        for spec in hef["outputs"]:
            if spec["order"] in ("HAILO_NMS", "HAILO_NMS_BY_CLASS"):
                per_class = [
                    np.asarray(hef["detections"].get(str(c), []), np.float32).reshape(-1, BBOX_PARAMS)
                    for c in range(spec.get("classes", 80))
                ]
                results[spec["name"]] = [per_class for _ in range(frames)]
            else:
                results[spec["name"]] = np.zeros((frames, *spec["shape"]), np.float32)
        return results
