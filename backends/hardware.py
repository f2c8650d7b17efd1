"""What accelerators this machine has, read from sysfs and /dev (no engine needed)."""

from __future__ import annotations

from pathlib import Path

# The Coral USB Accelerator enumerates as Global Unichip until its firmware is loaded, then as Google.
CORAL_USB_IDS = {
    ("1a6e", "089a"): "Coral USB Accelerator (firmware not loaded yet)",
    ("18d1", "9302"): "Coral USB Accelerator",
}
SYS_USB = Path("/sys/bus/usb/devices")
DEV = Path("/dev")
NVIDIA_PROC = Path("/proc/driver/nvidia/gpus")


def _read(path: Path) -> str:
    try:
        return path.read_text().strip().lower()
    except OSError:
        return ""


def coral_usb_devices(root: Path = SYS_USB) -> list[str]:
    """'usb:N  <description>  (bus-port, USB speed Mbit/s)' for each Coral USB Accelerator, in bus order."""
    found = []
    for device in sorted(root.glob("*")) if root.is_dir() else []:
        ids = (_read(device / "idVendor"), _read(device / "idProduct"))
        if ids in CORAL_USB_IDS:
            speed = _read(device / "speed") or "?"
            found.append(f"{CORAL_USB_IDS[ids]} at {device.name}, {speed} Mbit/s")
    return [f"usb:{i}  {d}" for i, d in enumerate(found)]


def coral_pcie_devices(dev: Path = DEV) -> list[str]:
    return [f"pci:{i}  {p}" for i, p in enumerate(sorted(dev.glob("apex_*")))] if dev.is_dir() else []


def nvidia_gpus(root: Path = NVIDIA_PROC) -> list[str]:
    gpus: list[str] = []
    for info in sorted(root.glob("*/information")) if root.is_dir() else []:
        model = next(
            (line.split(":", 1)[1].strip() for line in info.read_text().splitlines() if line.startswith("Model:")),
            "NVIDIA GPU",
        )
        gpus.append(f"cuda:{len(gpus)}  {model}")
    return gpus
