"""Rockchip NPU (RK3588, RK3576, RK356x) through rknn-toolkit-lite2's `RKNNLite`, with `.rknn` files.

Devices: auto (the runtime picks a free core), 0, 1, 2 (one core), 0_1 or all (cores together). An RK3588 has
three NPU cores, an RK3576 two, the RK356x one. RKNNLite (2.3, `rknn_lite.py`) documents the core mask for RK3576 and
RK3588 only ("set core mask, only valid for RK3576 / RK3588"): on single-core SoCs AUTO is always what is passed.
An RKNNLite context runs one inference at a time on the cores its mask names, so with `auto` and several lanes (several
streams on the model) the engine opens one context per core, each pinned to its core (NPU_CORE_0, _1, _2, as
rknn_model_zoo's multi-threaded examples do), and the pool's lanes are those contexts: no core idles while frames
wait.

Models: rknn_model_zoo's YOLOv8/YOLO11 exports (DFL outside the model, each stride split into a 64-channel box
branch, a class branch and a class-sum branch, NCHW) are read by the `yolov8-rknn` decoder; Rockchip splits them
because one int8 tensor holding both coordinates (0-640) and scores (0-1) quantises the scores badly.

A `.rknn` file does not declare its input size to RKNNLite: it comes from the model's sidecar .yaml or flags (640x640
otherwise), and the outputs are learned from one run on a blank frame at load.
"""

from __future__ import annotations

import queue
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from edge_inference.backends.base import Backend, BackendError, BackendOptions, TensorInfo
from edge_inference.backends.engine import BackendStatus, Engine, Offer, installed
from edge_inference.backends.hardware import ROCKCHIP_NPUS, rknpu_driver_version, rknpu_nodes, rockchip_soc

INSTALL = (
    "on the board (aarch64): `pip install rknn-toolkit-lite2` and Rockchip's runtime library of the same version "
    "(librknnrt.so from rknn-toolkit2's rknpu2 runtime, copied to /usr/lib); the kernel needs the RKNPU driver "
    "(vendor kernels of Rockchip boards have it)"
)
NO_DEVICE = "this is not a Rockchip board with an NPU (the device tree names no rk3588, rk3576, rk3568, rk3566, rk3562)"
NO_DRIVER = (
    "this {soc} board's kernel has no RKNPU driver (no /dev/rknpu, no rknpu entry in sysfs or debugfs): use the "
    "board vendor's kernel (e.g. Radxa, Orange Pi, Armbian vendor builds)"
)
DEFAULT_SIZE = (640, 640)
CORE_MASKS = {
    "auto": "NPU_CORE_AUTO",
    "0": "NPU_CORE_0",
    "1": "NPU_CORE_1",
    "2": "NPU_CORE_2",
    "0_1": "NPU_CORE_0_1",
    "all": "NPU_CORE_0_1_2",
}


def core_mask(device: str, soc: str) -> str:
    """The RKNNLite core mask name for a device setting on this SoC, or a message naming the choices."""
    value = device.strip().lower().removeprefix("npu").removeprefix(":") or "auto"
    value = {"npu": "auto", "rknn": "auto"}.get(value, value)
    cores = ROCKCHIP_NPUS.get(soc, 1)
    choices = ["auto", *[str(i) for i in range(cores)], *(["0_1", "all"] if cores > 1 else [])]
    if value not in choices:
        raise BackendError(f"{soc} has {cores} NPU core(s): choose the device from {', '.join(choices)}")
    if cores == 1:  # the mask is documented for the multi-core SoCs only
        return CORE_MASKS["auto"]
    if value == "all" and cores == 2:
        return CORE_MASKS["0_1"]
    return CORE_MASKS[value]


def lane_masks(device: str, soc: str, lanes: int) -> list[str]:
    """The core mask of each context to open: one per core for `auto` with several lanes, else the one asked for."""
    mask = core_mask(device, soc)
    cores = ROCKCHIP_NPUS.get(soc, 1)
    if mask != CORE_MASKS["auto"] or cores == 1 or lanes <= 1:
        return [mask]
    return [CORE_MASKS[str(core)] for core in range(min(lanes, cores))]


def runtime_version() -> str | None:
    try:
        return version("rknn-toolkit-lite2")
    except PackageNotFoundError:
        return None


def require_device() -> str:
    soc = rockchip_soc()
    if soc is None:
        raise BackendError(NO_DEVICE)
    if not rknpu_nodes():
        raise BackendError(NO_DRIVER.format(soc=soc))
    return soc


class RKNNBackend(Backend):
    parallel = "shared"  # `run` from several threads: each takes a free context (one per NPU core it was opened on)

    def __init__(self, *, runtimes: list[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._runtimes = runtimes
        self._free: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for runtime in runtimes:
            self._free.put(runtime)

    @property
    def lanes(self) -> int:
        return len(self._runtimes)

    def run(self, tensor: np.ndarray) -> list[np.ndarray]:
        runtime = self._free.get()
        try:
            outputs = runtime.inference(inputs=[tensor])
        finally:
            self._free.put(runtime)
        if outputs is None:
            raise BackendError("the NPU returned no outputs for this frame (see the RKNN runtime's log above)")
        return [np.asarray(o) for o in outputs]

    def close(self) -> None:
        for runtime in self._runtimes:
            runtime.release()


def load(path: Path, options: BackendOptions) -> RKNNBackend:
    if not installed("rknnlite"):
        raise BackendError(f"rknn-toolkit-lite2 is not installed: {INSTALL}")
    soc = require_device()
    masks = lane_masks(options.device, soc, options.lanes)
    runtimes: list[Any] = []
    try:
        for mask in masks:
            runtimes.append(_context(path, soc, mask))
        width, height = options.input_size or DEFAULT_SIZE
        blank = np.zeros((1, height, width, 3), np.uint8)
        outputs = runtimes[0].inference(inputs=[blank])
        if outputs is None:
            raise BackendError(f"{path.name} did not run on a {width}x{height} input: set width/height in its sidecar")
    except BaseException:
        for runtime in runtimes:
            runtime.release()
        raise
    notes = [] if options.input_size else [f"{path.name} does not declare its input size: {width}x{height} assumed"]
    cores = ", ".join(mask.removeprefix("NPU_CORE_").lower() for mask in masks)
    return RKNNBackend(
        key="rknn",
        model_path=str(path),
        engine=f"rknn-toolkit-lite2 {runtime_version() or '?'}",
        device=f"{soc} npu {cores}",
        inputs=[TensorInfo("input", blank.shape, np.dtype(np.uint8))],
        outputs=[TensorInfo(f"output{i}", tuple(np.shape(o)), np.asarray(o).dtype) for i, o in enumerate(outputs)],
        notes=notes,
        runtimes=runtimes,
    )


def _context(path: Path, soc: str, mask: str) -> Any:
    """One RKNNLite context on the cores `mask` names, the model loaded and its runtime started."""
    from rknnlite.api import RKNNLite

    runtime = RKNNLite(verbose=False)
    lite = runtime_version() or "?"
    if runtime.load_rknn(str(path)) != 0:
        raise BackendError(
            f"{path.name} is not a .rknn file this runtime reads: convert it with rknn-toolkit2 {lite} (the same "
            f"version as rknn-toolkit-lite2) and target_platform='{soc}'"
        )
    if runtime.init_runtime(core_mask=getattr(RKNNLite, mask)) != 0:
        runtime.release()
        raise BackendError(
            f"the NPU runtime did not start {path.name}: check that /usr/lib/librknnrt.so is of version {lite} and "
            f"that the model was converted for {soc} (target_platform)"
        )
    return runtime


def probe() -> BackendStatus:
    status = ENGINE.status()
    soc = rockchip_soc()
    if soc is not None and rknpu_nodes():
        driver = rknpu_driver_version()
        status.devices = [f"{soc} NPU, {ROCKCHIP_NPUS[soc]} core(s)" + (f", driver {driver}" if driver else "")]
    if not installed("rknnlite"):
        status.problem = "rknn-toolkit-lite2 is not installed"
        return status
    status.engine = f"rknn-toolkit-lite2 {runtime_version() or '?'}"
    if not status.devices:
        status.problem = NO_DRIVER.format(soc=soc) if soc else NO_DEVICE
        return status
    status.available = True
    return status


def rank(path: Path) -> Offer | None:
    soc = rockchip_soc()
    if ENGINE.reads(path.name) and installed("rknnlite") and soc and rknpu_nodes():
        return Offer(100, "auto", f".rknn model and the {soc} NPU: it runs on the NPU")
    return None


ENGINE = Engine(
    key="rknn",
    formats=(".rknn",),
    install=INSTALL,
    probe=probe,
    load=load,
    rank=rank,
    listed=50,
    distributions=("rknn-toolkit-lite2",),
    # one NPU per board: a device setting picks its cores (the core mask), not another chip
    chip=lambda device: "npu",
)
