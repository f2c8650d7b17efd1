"""Fake device trees (sysfs, /proc, /dev) as the kernel shows them, for discovery and `edge doctor` on boards this
machine is not: a Raspberry Pi 5 with a Coral and a Hailo, an RK3588 board. Point EDGE_SYSROOT at the root."""

from __future__ import annotations

from pathlib import Path


def write(root: Path, path: str, text: str = "", mode: int | None = None) -> Path:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    if mode is not None:
        target.chmod(mode)
    return target


def usb_device(root: Path, port: str, vendor: str, product: str, speed: str) -> None:
    for name, value in (("idVendor", vendor), ("idProduct", product), ("speed", speed)):
        write(root, f"/sys/bus/usb/devices/{port}/{name}", value + "\n")


def hailo(root: Path, *, node_mode: int = 0o666, driver: str = "4.20.0", node: bool = True) -> None:
    """A Hailo-8L on the Pi 5's PCIe port, as the hailo_pci driver shows it."""
    write(root, "/sys/bus/pci/devices/0000:01:00.0/vendor", "0x1e60\n")
    write(root, "/sys/bus/pci/devices/0000:01:00.0/device", "0x2864\n")
    write(root, "/sys/module/hailo_pci/version", driver + "\n")
    if node:
        write(root, "/dev/hailo0", mode=node_mode)


def raspberry_pi(root: Path, *, throttled: str = "0x0", temp_millicelsius: int = 52000) -> None:
    write(root, "/proc/device-tree/model", "Raspberry Pi 5 Model B Rev 1.0\x00")
    write(root, "/proc/device-tree/compatible", "raspberrypi,5-model-b\x00brcm,bcm2712\x00")
    write(root, "/sys/devices/platform/soc/soc:firmware/get_throttled", throttled + "\n")
    write(root, "/sys/class/thermal/thermal_zone0/type", "cpu-thermal\n")
    write(root, "/sys/class/thermal/thermal_zone0/temp", f"{temp_millicelsius}\n")
    write(root, "/proc/meminfo", "MemTotal:        8245208 kB\nMemAvailable:    6123456 kB\n")


def rk3588(root: Path, *, driver: bool = True) -> None:
    write(root, "/proc/device-tree/compatible", "radxa,rock-5b\x00rockchip,rk3588\x00")
    if driver:
        write(root, "/sys/kernel/debug/rknpu/version", "RKNPU driver: v0.9.6\n")
