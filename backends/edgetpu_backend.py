"""Coral Edge TPU: the LiteRT (TFLite) interpreter with the libedgetpu delegate, loaded with `load_delegate`.

One runtime, one way: pycoral is not used even where it imports. Its `load_edgetpu_delegate`
(`pycoral/utils/edgetpu.py`) hard-codes libedgetpu.so.1, which would silently ignore EDGE_LIBEDGETPU, and creates the
delegate through `tflite_runtime`, a second TFLite runtime beside the interpreter's; it adds nothing over
`load_delegate(library, {"device": ...})`.

Devices, as libedgetpu reads its "device" option: usb, usb:N (the N-th USB accelerator), pci, pci:N, :N (the N-th
Edge TPU of any kind), or auto (the first one found). EDGE_LIBEDGETPU names another delegate library.
"""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path

from edge_inference.backends.base import BackendError, BackendOptions, BackendRefused
from edge_inference.backends.edgetpu_runtime import (
    INSTALL_PAIR,
    cpu_operations_note,
    delegate_library,
    installed_package,
    pair_verdict,
    runtime_named,
)
from edge_inference.backends.engine import BackendStatus, Engine, Offer
from edge_inference.backends.hardware import coral_pcie_devices, coral_usb_devices
from edge_inference.backends.tflite_backend import TFLiteBackend, allocate, describe, import_litert, is_edgetpu_model
from edge_inference.extras import install_extra

INSTALL_LIBEDGETPU = f"{INSTALL_PAIR}; then unplug and replug the accelerator"
NO_DEVICE = (
    "no Edge TPU found. USB Accelerator: plug it straight into a USB 3 port (blue) or a powered hub (on a Raspberry "
    "Pi the board needs a 3 A supply), make sure the udev rule from the libedgetpu package is installed "
    "(/etc/udev/rules.d/99-edgetpu-accelerator.rules) and this user is in 'plugdev', then replug; `lsusb` must show "
    "1a6e:089a or 18d1:9302. PCIe/M.2: install gasket-dkms so /dev/apex_0 appears"
)
_DEVICE = re.compile(r"^(usb|pci)?(:\d+)?$")


def parse_device(device: str) -> str | None:
    """'auto'/'edgetpu'/'' -> None (any); 'usb', 'usb:1', 'pci:0', ':0' kept as the delegate expects them."""
    value = device.strip().lower()
    if value == "cpu":  # a compiled model's TPU part runs nowhere else: "cpu" would silently mean "any TPU"
        raise BackendError(
            "the edgetpu engine runs on an Edge TPU only; for the CPU use --backend tflite with the model's "
            "uncompiled .tflite (a compiled _edgetpu.tflite runs on the TPU alone)"
        )
    if value in ("", "auto", "edgetpu", "tpu"):
        return None
    if not _DEVICE.match(value):
        raise BackendError(f"Edge TPU device {device!r} not understood; use usb, usb:N, pci, pci:N or auto")
    return value


def chip(device: str) -> str:
    """The Edge TPU a device setting names: `usb` is the first USB one, and any setting names the one Edge TPU of a
    machine that has one; with several, `auto` and `:N` stay as written (libedgetpu picks among them)."""
    wanted = parse_device(device) or ""
    kind, _, index = wanted.partition(":")
    if kind:
        return f"{kind}:{index or 0}"
    present = [d.split()[0] for d in coral_usb_devices() + coral_pcie_devices()]
    if len(present) == 1 and index in ("", "0"):
        return present[0]
    return wanted or "auto"


def diagnose(library: str, device: str | None) -> str:
    """Why the delegate did not load, as precisely as this machine lets us tell."""
    try:
        ctypes.CDLL(library)
    except OSError as exc:
        if os.path.sep in library and Path(library).exists():
            reason = str(exc).split(":")[-1].strip()
            return f"{library} is not a loadable Edge TPU library ({reason}); {INSTALL_LIBEDGETPU}"
        return f"the Edge TPU runtime ({library}) is not installed; {INSTALL_LIBEDGETPU}"
    usb, pci = coral_usb_devices(), coral_pcie_devices()
    found = {"usb": usb, "pci": pci}
    if not usb and not pci:
        return NO_DEVICE
    if device:
        kind, _, index = device.partition(":")
        present = found[kind] if kind else usb + pci  # ":N" counts every Edge TPU, whatever its kind
        if index and int(index) >= len(present):
            what = f"{kind.upper()} Edge TPU(s)" if kind else "Edge TPU(s)"
            return f"asked for {device} but found {len(present)} {what}: {'; '.join(usb + pci)}"
    return (
        f"the Edge TPU did not respond ({'; '.join(usb + pci)}): replug it, check its power supply and that this user "
        "may open it (udev rule, 'plugdev' group); a USB accelerator that stays at 1a6e:089a never got its firmware"
    )


class EdgeTPUBackend(TFLiteBackend):
    parallel = "none"  # one interpreter per Edge TPU: the device runs one model at a time


def load(path: Path, options: BackendOptions) -> TFLiteBackend:
    device = parse_device(options.device)
    if not is_edgetpu_model(path):
        raise BackendError(
            f"{path.name} is not compiled for the Edge TPU, so it would run entirely on the CPU. Compile it with "
            f"`edgetpu_compiler {path.name}` (int8-quantised models only), or run it with --backend tflite"
        )
    library = delegate_library()
    interpreter_cls, load_delegate, engine = import_litert(prefer_tflite_runtime=True)
    try:
        # Checked first: LiteRT's Delegate prints a stray traceback for a missing or foreign library.
        if not hasattr(ctypes.CDLL(library), "tflite_plugin_create_delegate"):
            raise BackendError(
                f"cannot use the Edge TPU: {library} is not a TFLite delegate library (it has no "
                f"tflite_plugin_create_delegate); point EDGE_LIBEDGETPU at libedgetpu.so.1, or unset it"
            )
        # Before the delegate: a known-bad pair crashes the process on its first inference (google-coral/edgetpu#812)
        pair = pair_verdict(installed_package(), runtime_named(engine))
        if pair.kind == "bad":
            raise BackendRefused(f"cannot use the Edge TPU: {pair.line}")
        delegate = load_delegate(library, {"device": device} if device else {})
        interpreter = interpreter_cls(
            model_path=str(path), experimental_delegates=[delegate], num_threads=options.threads
        )
    except BackendError:
        raise
    except (ValueError, RuntimeError, OSError, AttributeError):  # AttributeError: a library without the delegate
        raise BackendError(f"cannot use the Edge TPU: {diagnose(library, device)}") from None
    allocate(interpreter, path)
    inputs, outputs = describe(interpreter)
    on_cpu = cpu_operations_note(path)
    return EdgeTPUBackend(
        key="edgetpu",
        model_path=str(path),
        engine=f"{engine} + {Path(library).name}",
        device=f"edgetpu:{device or 'auto'}",
        inputs=inputs,
        outputs=outputs,
        notes=[note for note in (pair.line, on_cpu) if note],
        interpreter=interpreter,
    )


def probe() -> BackendStatus:
    from edge_inference.backends.tflite_backend import probe as probe_litert

    status = ENGINE.status()
    status.devices = coral_usb_devices() + coral_pcie_devices()
    if not probe_litert().available:
        status.problem = "LiteRT is not installed (the Edge TPU runs through its delegate)"
        return status
    library = delegate_library()
    try:
        ctypes.CDLL(library)
    except OSError:
        status.problem = f"{library} is not installed: {INSTALL_LIBEDGETPU}"
        return status
    status.engine = f"LiteRT + {Path(library).name}"
    status.available = bool(status.devices)
    status.problem = None if status.devices else NO_DEVICE
    return status


def rank(path: Path) -> Offer | None:
    """A model compiled for the Edge TPU runs nowhere else: chosen even without a device, whose absence loading
    then explains."""
    if path.name.lower().endswith(".tflite") and is_edgetpu_model(path):
        return Offer(100, "auto", "the model is compiled for the Edge TPU")
    return None


ENGINE = Engine(
    key="edgetpu",
    formats=("_edgetpu.tflite",),
    install=f"{install_extra('tflite')} and {INSTALL_PAIR.removeprefix('install ')}",
    probe=probe,
    load=load,
    rank=rank,
    listed=2,
    distributions=("ai-edge-litert", "tflite-runtime"),
    chip=chip,
)
