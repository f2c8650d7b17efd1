"""What accelerators this machine has, read from sysfs, /proc and /dev (no engine needed, nothing imported).

Every path is read under the system root, `/` unless EDGE_SYSROOT names another folder: tests and `edge doctor
--root` point it at a fake device tree (a Raspberry Pi with a Coral and a Hailo, an RK3588 board) built by hand.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# The Coral USB Accelerator enumerates as Global Unichip until its firmware is loaded, then as Google.
CORAL_USB_IDS = {
    ("1a6e", "089a"): "Coral USB Accelerator (firmware not loaded yet)",
    ("18d1", "9302"): "Coral USB Accelerator",
}
HAILO_VENDOR = "0x1e60"
HAILO_PCI_IDS = {"0x2864": "Hailo-8/8L", "0x45c4": "Hailo-10H"}
# device-tree `compatible` names of Rockchip SoCs with an NPU, and their NPU core count
ROCKCHIP_NPUS = {"rk3588": 3, "rk3576": 2, "rk3568": 1, "rk3566": 1, "rk3562": 1}


def system_root() -> Path:
    return Path(os.environ.get("EDGE_SYSROOT") or "/")


def under(path: str, root: Path | None = None) -> Path:
    """`path` (absolute, e.g. /sys/bus/usb) inside the system root."""
    return (root or system_root()) / path.lstrip("/")


# Places this user may not look at, met while looking (debugfs is root's alone: 0700): what they would have said
# cannot be told, and `edge doctor` says so. Never an error: the service and its probes run as a user of their own
# (the systemd unit's `edge`, the image's 10001), where Python's `Path.exists()` raised PermissionError.
NOT_ALLOWED: set[str] = set()


def read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except PermissionError:
        NOT_ALLOWED.add(str(path.parent))
        return ""
    except OSError:
        return ""


def exists(path: Path) -> bool:
    """Whether `path` exists; False where this user may not look (noted in NOT_ALLOWED)."""
    return _looked(path.exists, path)


def is_dir(path: Path) -> bool:
    return _looked(path.is_dir, path)


def _looked(check: Callable[[], bool], path: Path) -> bool:
    try:
        return check()
    except PermissionError:
        NOT_ALLOWED.add(str(path.parent))
        return False


def listed(base: Path, pattern: str) -> list[Path]:
    """`base.glob(pattern)`, sorted; [] where this user may not list it (noted in NOT_ALLOWED)."""
    if not is_dir(base):
        return []
    try:
        if not os.access(base, os.R_OK | os.X_OK):
            raise PermissionError(base)
        return sorted(base.glob(pattern))
    except PermissionError:
        NOT_ALLOWED.add(str(base))
        return []


def _read(path: Path) -> str:
    return read_text(path).lower()


@dataclass(frozen=True)
class UsbDevice:
    port: str  # bus-port, as sysfs names it
    vendor: str
    product: str
    speed_mbps: float | None  # 480: USB 2, 5000 and up: USB 3


def usb_devices(root: Path | None = None) -> list[UsbDevice]:
    base = under("/sys/bus/usb/devices", root)
    found = []
    for device in listed(base, "*"):
        vendor, product = _read(device / "idVendor"), _read(device / "idProduct")
        if vendor and product:
            speed = _read(device / "speed")
            found.append(UsbDevice(device.name, vendor, product, float(speed) if _is_number(speed) else None))
    return found


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def coral_usb(root: Path | None = None) -> list[UsbDevice]:
    return [d for d in usb_devices(root) if (d.vendor, d.product) in CORAL_USB_IDS]


def coral_usb_devices(root: Path | None = None) -> list[str]:
    """'usb:N  <description>  (bus-port, USB speed Mbit/s)' for each Coral USB Accelerator, in bus order."""
    found = []
    for device in coral_usb(root):
        speed = f"{device.speed_mbps:g}" if device.speed_mbps is not None else "?"
        found.append(f"{CORAL_USB_IDS[(device.vendor, device.product)]} at {device.port}, {speed} Mbit/s")
    return [f"usb:{i}  {d}" for i, d in enumerate(found)]


def device_nodes(pattern: str, root: Path | None = None) -> list[Path]:
    """Nodes under /dev matching a glob (e.g. 'apex_*', 'accel/accel*'), as paths inside the system root."""
    return listed(under("/dev", root), pattern)


def coral_pcie_devices(root: Path | None = None) -> list[str]:
    return [f"pci:{i}  /dev/{p.name}" for i, p in enumerate(device_nodes("apex_*", root))]


def nvidia_gpus(root: Path | None = None) -> list[str]:
    gpus: list[str] = []
    base = under("/proc/driver/nvidia/gpus", root)
    for info in listed(base, "*/information"):
        model = next(
            (line.split(":", 1)[1].strip() for line in read_text(info).splitlines() if line.startswith("Model:")),
            "NVIDIA GPU",
        )
        gpus.append(f"cuda:{len(gpus)}  {model}")
    return gpus


def hailo_pci_devices(root: Path | None = None) -> list[str]:
    """'Hailo-8/8L at 0000:01:00.0' for each Hailo on the PCIe bus, whether or not its driver is loaded."""
    base = under("/sys/bus/pci/devices", root)
    found = []
    for device in listed(base, "*"):
        if _read(device / "vendor") == HAILO_VENDOR:
            found.append(f"{HAILO_PCI_IDS.get(_read(device / 'device'), 'Hailo device')} at {device.name}")
    return found


def hailo_nodes(root: Path | None = None) -> list[Path]:
    return device_nodes("hailo*", root)


def hailo_driver_version(root: Path | None = None) -> str | None:
    """The hailo_pci kernel module's version, which HailoRT must match."""
    return read_text(under("/sys/module/hailo_pci/version", root)) or None


def rockchip_soc(root: Path | None = None) -> str | None:
    """'rk3588' etc. from the device tree's `compatible` list (NUL-separated 'vendor,name' entries)."""
    compatible = read_text(under("/proc/device-tree/compatible", root)).replace("\x00", " ").lower()
    return next((soc for soc in ROCKCHIP_NPUS if f"rockchip,{soc}" in compatible), None)


def rknpu_nodes(root: Path | None = None) -> list[Path]:
    """The RKNPU driver's node: /dev/rknpu (older kernels), or its debugfs/sysfs entry on the DRM driver."""
    found = device_nodes("rknpu*", root)
    for place in ("/sys/kernel/debug/rknpu", "/sys/class/misc/rknpu", "/sys/module/rknpu"):
        if exists(under(place, root)):
            found.append(under(place, root))
    return found


def rknpu_driver_version(root: Path | None = None) -> str | None:
    for place in ("/sys/kernel/debug/rknpu/version", "/sys/module/rknpu/version"):
        text = read_text(under(place, root))
        if text:
            return text.split(":")[-1].strip()
    return None


INTEL_VENDOR = "0x8086"


def intel_accelerators(root: Path | None = None) -> list[str]:
    """Intel GPUs (DRM render nodes of vendor 0x8086) and NPUs (/dev/accel/accel*) that OpenVINO could use.

    Read from sysfs and /dev so that `--backend auto` need not import OpenVINO (+46 MiB, +0.16 s) to learn that
    this machine has nothing for it but the CPU.
    """
    found = []
    for node in listed(under("/sys/class/drm", root), "renderD*"):
        if _read(node / "device" / "vendor") == INTEL_VENDOR:
            found.append(f"GPU  Intel graphics at /dev/dri/{node.name}")
    found += [f"NPU  /dev/accel/{p.name}" for p in device_nodes("accel/accel*", root)]
    return found
