"""A stand-in for rknn-toolkit-lite2 2.3.2's `rknnlite.api.RKNNLite`, for the tests only: never installed.

Copied from `rknnlite/api/rknn_lite.py` in rknn_toolkit_lite2-2.3.2 (airockchip/rknn-toolkit2): the core mask
constants and their values, the return codes (0 success, -1 failure, with the reason in the runtime's log),
`inference` returning None when inputs cannot be set or the run fails, and `init_runtime` refusing to run anywhere
but on the board ("does not support simulator") unless a target is named. The board this stand-in is (`MACHINE`,
`SOC`) matches the fake device tree of the tests (an RK3588). What `rknn_runtime.set_core_mask` does on a single-core
SoC is not in the Python source (the runtime is compiled): the stand-in refuses any mask but AUTO there, as the
documentation ("only valid for RK3576 / RK3588") allows.

The model is an .npz written by `write_rknn`: the input shape it takes and the outputs it returns.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import numpy as np

MACHINE = "aarch64"
SOC = "rk3588"
CALLS: list[str] = []
log = logging.getLogger("rknnlite")


def write_rknn(path: Path, input_shape: tuple[int, ...], outputs: list[np.ndarray]) -> Path:
    with path.open("wb") as file:
        np.savez(file, input_shape=np.array(input_shape), **{f"output{i}": o for i, o in enumerate(outputs)})
    return path


class RKNNLite:
    NPU_CORE_AUTO = 0
    NPU_CORE_0 = 1
    NPU_CORE_1 = 2
    NPU_CORE_2 = 4
    NPU_CORE_0_1 = 3
    NPU_CORE_0_1_2 = 7
    NPU_CORE_ALL = 0xFFFF

    def __init__(self, verbose: bool = False, verbose_file: str | None = None):
        self.rknn_data: bytes | None = None
        self.runtime: dict[str, Any] | None = None
        self.core_mask: int | None = None

    def load_rknn(self, path: str) -> int:
        if not Path(path).exists():
            log.error("Invalid RKNN model path: %s", path)
            return -1
        self.rknn_data = Path(path).read_bytes()
        return 0

    def init_runtime(
        self,
        target: str | None = None,
        device_id: str | None = None,
        async_mode: bool = False,
        core_mask: int = NPU_CORE_AUTO,
    ) -> int:
        CALLS.append(f"init_runtime(core_mask={core_mask})")
        if target is None and MACHINE not in ("aarch64", "armv7l"):
            log.error("RKNN Toolkit Lite2 does not support simulator, please specify the target")
            return -1
        if self.rknn_data is None:
            log.error("Model is not loaded yet, this interface should be called after load_rknn!")
            return -1
        try:  # build_graph
            with np.load(io.BytesIO(self.rknn_data)) as model:
                self.runtime = {name: model[name] for name in model.files}
        except (OSError, ValueError):
            log.error("Catch exception when init runtime!")
            return -1
        if core_mask != self.NPU_CORE_AUTO and SOC not in ("rk3576", "rk3588"):
            log.error("Catch exception when set npu core mode.")
            return -1
        self.core_mask = core_mask
        return 0

    def inference(
        self,
        inputs: list[np.ndarray],
        data_type: str | None = None,
        data_format: str | None = None,
        inputs_pass_through: list[int] | None = None,
        get_frame_id: bool = False,
    ) -> list[np.ndarray] | None:
        if self.runtime is None:
            log.error("Runtime environment is not inited, please call init_runtime to init it first!")
            return None
        expected = tuple(int(d) for d in self.runtime["input_shape"])
        if len(inputs) != 1 or tuple(np.shape(inputs[0])) != expected:
            log.error("Catch exception when setting inputs.")
            return None
        CALLS.append(f"inference(core_mask={self.core_mask})")
        count = len(self.runtime) - 1
        return [self.runtime[f"output{i}"].copy() for i in range(count)]

    def release(self) -> None:
        CALLS.append("release")
        self.runtime = None
