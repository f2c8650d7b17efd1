"""`edge doctor`: what a user's first hour goes wrong on, each with what to do.

Engines and their versions; accelerators present (Coral USB before and after its firmware, and its USB port speed;
/dev/apex_*, Hailo, Rockchip NPU, Intel NPU and GPU render nodes, NVIDIA); whether the service's user may open each
node; cameras; free memory, CPU throttling and temperature where the platform tells; the model cache. Everything is
read under the system root (EDGE_SYSROOT, `--root`), so a fake device tree checks boards this machine is not.
A `fail` blocks serving; a `warn` costs speed or a device; `info` is for the record.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from edge_inference.backends import engines
from edge_inference.backends.edgetpu_runtime import (
    delegate_library,
    installed_package,
    library_build,
    pair_problem,
    runtime_version,
)
from edge_inference.backends.hardware import (
    CORAL_USB_IDS,
    NOT_ALLOWED,
    coral_usb,
    device_nodes,
    exists,
    hailo_pci_devices,
    listed,
    nvidia_gpus,
    read_text,
    rknpu_nodes,
    rockchip_soc,
    system_root,
    under,
)
from edge_inference.backends.isolated import recorded
from edge_inference.edge.detection.memory import MIB, cgroup_memory_headroom, meminfo_available
from edge_inference.edge.settings import Settings
from edge_inference.edge.stream.ffmpeg import FFMPEG, PRESETS, ffmpeg_offers
from edge_inference.models.download import check_cached, is_cached
from edge_inference.models.errors import ModelError
from edge_inference.models.registry import REGISTRY

Status = Literal["ok", "warn", "fail", "info"]
LOW_MEMORY_MB = 300
HOT_CELSIUS = 80.0
# Raspberry Pi firmware's get_throttled bits: what is happening now (low bits) and what has happened since boot.
THROTTLE_BITS = {
    0: "under-voltage now",
    1: "ARM frequency capped now",
    2: "throttled now",
    3: "soft temperature limit now",
    16: "under-voltage has occurred",
    17: "frequency capping has occurred",
    18: "throttling has occurred",
    19: "soft temperature limit has occurred",
}
# Nodes a detector or camera opens, and what gives a user access to them.
NODE_FIXES = {
    "apex_*": "install the gasket-dkms udev rule and add the user to the 'apex' group: sudo usermod -aG apex {user}",
    "hailo*": (
        'HailoRT\'s udev rule makes /dev/hailo* world-readable (51-hailo-udev.rules: SUBSYSTEM=="hailo_chardev", '
        'MODE="0666"): sudo apt install --reinstall hailo-all (or add that rule) and replug/reboot'
    ),
    "rknpu*": 'add a udev rule giving the user\'s group access to /dev/rknpu (MODE="0660", GROUP="video")',
    "accel/accel*": "add the user to the 'render' group: sudo usermod -aG render {user} (then log in again)",
    "dri/renderD*": "add the user to the 'render' group: sudo usermod -aG render {user} (then log in again)",
    "video*": "add the user to the 'video' group: sudo usermod -aG video {user} (then log in again)",
}
NOT_CAMERAS = ("codec", "isp", "pispbe", "rpivid", "hevc", "rpi-hevc", "bcm2835-", "mem2mem", "rkisp", "rkvdec")


@dataclass(frozen=True)
class Finding:
    section: str  # engines, devices, permissions, cameras, system, models
    subject: str
    status: Status
    detail: str
    fix: str | None = None


@dataclass(frozen=True)
class Account:
    """Whom the service runs as: the checks ask what this user may open, not what `edge doctor`'s user may."""

    name: str
    uid: int
    gids: frozenset[int]

    @classmethod
    def named(cls, name: str | None) -> Account:
        entry = pwd.getpwnam(name) if name else pwd.getpwuid(os.getuid())
        groups = {g.gr_gid for g in grp.getgrall() if entry.pw_name in g.gr_mem} | {entry.pw_gid}
        return cls(entry.pw_name, entry.pw_uid, frozenset(groups))

    def may_open(self, path: Path) -> bool:
        """Read and write by the mode bits that apply to this user (root may open anything)."""
        if self.uid == 0:
            return True
        info = path.stat()
        if info.st_uid == self.uid:
            return info.st_mode & (stat.S_IRUSR | stat.S_IWUSR) == (stat.S_IRUSR | stat.S_IWUSR)
        if info.st_gid in self.gids:
            return info.st_mode & (stat.S_IRGRP | stat.S_IWGRP) == (stat.S_IRGRP | stat.S_IWGRP)
        return info.st_mode & (stat.S_IROTH | stat.S_IWOTH) == (stat.S_IROTH | stat.S_IWOTH)


def check_engines() -> Iterator[Finding]:
    usable = 0
    for key, engine in engines().items():
        status = engine.probe()
        devices = f" ({', '.join(d.split('  ')[0] for d in status.devices)})" if status.devices else ""
        if status.available:
            usable += 1
            yield Finding("engines", key, "ok", f"{status.engine}{devices}")
        elif status.devices:  # the device is here and the engine cannot use it: worth fixing
            yield Finding("engines", key, "warn", f"{status.problem}{devices}", status.install)
        else:
            yield Finding("engines", key, "info", status.problem or "not available", status.install)
    if not usable:
        yield Finding("engines", "any", "fail", "no inference engine can run here", "pip install onnxruntime")


def check_edgetpu_runtime() -> Iterator[Finding]:
    """libedgetpu and the TFLite runtime it is loaded into, where libedgetpu is installed: a pair that is known to
    crash (Coral's own package with a runtime newer than 2.11) or was built for another TF is a warning."""
    library = delegate_library()
    build = library_build(library)
    if build is None:
        return  # not installed: the engine's own finding says so
    package, runtime = installed_package(), runtime_version()
    problem = pair_problem(package, runtime)
    said = f"{package or library}: {build}; runtime {runtime or 'none installed'}"
    fix = "docs/hardware/coral.md: the known-good pairs per system"
    yield Finding("engines", "edgetpu runtime", "warn" if problem else "ok", problem or said, fix if problem else "")


def check_engine_deaths(settings: Settings, shown: int = 3) -> Iterator[Finding]:
    """The last engine processes that died under the service (recorded in the model cache by
    backends/isolated.py): a Coral that aborts on a failed USB transfer shows here after the fact."""
    deaths = recorded(settings.model_cache)
    for death in deaths[-shown:]:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(death.at))
        fix = "if it repeats: check the device's cable and power (a Pi's USB port browning out) and its runtime"
        yield Finding("engines", f"{death.engine} died", "warn", f"{when}: {death.line}", fix)


def check_devices(root: Path) -> Iterator[Finding]:
    found = list(_devices(root))
    yield from found or [
        Finding("devices", "accelerators", "info", "none found: the CPU runs the models (docs/hardware/index.md)")
    ]


def _devices(root: Path) -> Iterator[Finding]:
    for device in coral_usb(root):
        name = CORAL_USB_IDS[(device.vendor, device.product)]
        if device.speed_mbps is not None and device.speed_mbps < 5000:
            yield Finding(
                "devices",
                f"coral usb {device.port}",
                "warn",
                f"{name} on a USB 2 port ({device.speed_mbps:g} Mbit/s): inference is several times slower",
                "plug it into a USB 3 port (blue) directly, not through a USB 2 hub",
            )
        else:
            yield Finding("devices", f"coral usb {device.port}", "ok", f"{name}, {device.speed_mbps or '?'} Mbit/s")
    for node in device_nodes("apex_*", root):
        yield Finding("devices", f"/dev/{node.name}", "ok", "Coral PCIe/M.2 Edge TPU")
    yield from _hailo_devices(root)
    yield from _rockchip_devices(root)
    for node in device_nodes("accel/accel*", root):
        yield Finding("devices", f"/dev/accel/{node.name}", "ok", "NPU (Intel Core Ultra with OpenVINO's NPU device)")
    for node in device_nodes("dri/renderD*", root):
        yield Finding("devices", f"/dev/dri/{node.name}", "info", "GPU render node (OpenVINO GPU, VA-API decoding)")
    for gpu in nvidia_gpus(root):
        yield Finding("devices", gpu.split("  ")[0], "ok", gpu.split("  ", 1)[-1])


def _hailo_devices(root: Path) -> Iterator[Finding]:
    nodes, pci = device_nodes("hailo*", root), hailo_pci_devices(root)
    for node in nodes:
        yield Finding("devices", f"/dev/{node.name}", "ok", ", ".join(pci) or "Hailo device")
    if pci and not nodes:
        yield Finding(
            "devices",
            "hailo",
            "warn",
            f"{', '.join(pci)} on the PCIe bus but no /dev/hailo0: its driver is not loaded",
            "sudo apt install hailo-all (or hailort-pcie-driver) and reboot",
        )


def _rockchip_devices(root: Path) -> Iterator[Finding]:
    soc = rockchip_soc(root)
    if soc is None:
        return
    if rknpu_nodes(root):
        yield Finding("devices", f"{soc} npu", "ok", "Rockchip NPU with its RKNPU driver")
    else:
        fix = "use the board vendor's kernel, which has the RKNPU driver"
        yield Finding("devices", f"{soc} npu", "warn", "no RKNPU driver in this kernel", fix)


def check_permissions(root: Path, account: Account) -> Iterator[Finding]:
    if account.uid == 0:
        yield Finding("permissions", account.name, "info", "checked as root, who may open anything", "pass --user")
        return
    yield from _coral_usb_permissions(root, account)
    for pattern, fix in NODE_FIXES.items():
        for node in device_nodes(pattern, root):
            shown = f"/{node.relative_to(root)}"
            if account.may_open(node):
                yield Finding("permissions", shown, "ok", f"{account.name} may open it")
            else:
                mode = stat.filemode(node.stat().st_mode)
                detail = f"{account.name} may not open it ({mode})"
                yield Finding("permissions", shown, "warn", detail, fix.format(user=account.name))


def _coral_usb_permissions(root: Path, account: Account) -> Iterator[Finding]:
    """A USB accelerator is opened through /dev/bus/usb/BBB/DDD, which the libedgetpu udev rule opens up."""
    for device in coral_usb(root):
        sysfs = under(f"/sys/bus/usb/devices/{device.port}", root)
        bus, number = read_text(sysfs / "busnum"), read_text(sysfs / "devnum")
        if not (bus.isdigit() and number.isdigit()):
            continue
        node = under(f"/dev/bus/usb/{int(bus):03d}/{int(number):03d}", root)
        if exists(node) and not account.may_open(node):
            yield Finding(
                "permissions",
                f"/{node.relative_to(root)}",
                "warn",
                f"{account.name} may not open the Coral USB Accelerator ({stat.filemode(node.stat().st_mode)})",
                "install the udev rule of libedgetpu1-std (99-edgetpu-accelerator.rules), "
                f"sudo usermod -aG plugdev {account.name}, then replug it",
            )


def check_cameras(root: Path) -> Iterator[Finding]:
    found = False
    for node in device_nodes("video*", root):
        name = read_text(under(f"/sys/class/video4linux/{node.name}/name", root)) or "?"
        if any(part in name.lower() for part in NOT_CAMERAS):
            continue  # the SoC's codec and ISP nodes are /dev/video* too
        found = True
        yield Finding("cameras", f"/dev/{node.name}", "ok", f"{name}; {_formats(node, root)}")
    if not found:
        yield Finding("cameras", "v4l2", "info", "no V4L2 camera (/dev/video*); RTSP and HTTP cameras need none")


def _formats(node: Path, root: Path) -> str:
    tool = shutil.which("v4l2-ctl")
    if root != Path("/"):
        return "formats not read (fake device tree)"
    if tool is None:
        return "formats unknown: sudo apt install v4l-utils to list them"
    proc = subprocess.run(
        [tool, "--list-formats-ext", "-d", str(node)], capture_output=True, text=True, timeout=10, check=False
    )
    sizes = sorted({w.split()[-1] for w in proc.stdout.splitlines() if "Size:" in w})
    kinds = sorted({line.split("'")[1] for line in proc.stdout.splitlines() if "]: '" in line})
    return f"{', '.join(kinds) or '?'} at {', '.join(sizes[:6]) or '?'}"


def check_decoders(root: Path) -> Iterator[Finding]:
    """The ffmpeg program, its hardware methods, and which `ffmpeg: hwaccel` presets can work on this machine."""
    program = shutil.which(FFMPEG)
    if program is None:
        fix = "apt install ffmpeg, then give a stream ffmpeg: {hwaccel: <preset>}"
        yield Finding("decoders", "ffmpeg", "info", "not installed: every source decodes in software (OpenCV)", fix)
        return
    offered = ffmpeg_offers(program)
    yield Finding("decoders", "ffmpeg", "ok", f"{program}; hardware methods: {', '.join(offered.hwaccels) or 'none'}")
    unusable = []
    for name, preset in PRESETS.items():
        kind, _, needed = preset.needs.partition(":")
        has = needed in (offered.hwaccels if kind == "hwaccel" else offered.decoders)
        device = root / preset.device.lstrip("/")
        if has and exists(device):
            yield Finding("decoders", name, "ok", f"{needed} in this FFmpeg and {preset.device} present")
        else:
            unusable.append(f"{name} ({'no ' + preset.device if has else 'FFmpeg lacks ' + needed})")
    if unusable:
        yield Finding("decoders", "presets", "info", "not usable here: " + ", ".join(unusable))


def check_system(root: Path) -> Iterator[Finding]:
    available_bytes = meminfo_available(under("/proc/meminfo", root))
    if available_bytes is not None:
        available = available_bytes // MIB
        status: Status = "warn" if available < LOW_MEMORY_MB else "ok"
        fix = "close other programs or use a smaller model (yolox-nano, ssd-mobilenet-v2)" if status == "warn" else None
        yield Finding("system", "memory", status, f"{available} MiB available", fix)
    yield from _memory_limit(root)
    yield from _throttling(root)
    yield from _temperature(root)


def _memory_limit(root: Path) -> Iterator[Finding]:
    """A container's or a systemd unit's memory limit: what it leaves, which MemAvailable does not show."""
    headroom = cgroup_memory_headroom(under("/proc/self/cgroup", root), under("/sys/fs/cgroup", root))
    if headroom is None:
        return
    left = headroom // MIB
    status: Status = "warn" if left < LOW_MEMORY_MB else "ok"
    fix = (
        "raise the limit (docker run --memory, MemoryMax= in the systemd unit) or use a smaller model; every lane "
        "of an engine holds memory, and an engine keeps only the lanes the limit leaves room for"
        if status == "warn"
        else None
    )
    yield Finding("system", "memory limit", status, f"{left} MiB left under this process's memory cgroup", fix)


def _throttling(root: Path) -> Iterator[Finding]:
    text = read_text(under("/sys/devices/platform/soc/soc:firmware/get_throttled", root))
    if not text and root == Path("/") and shutil.which("vcgencmd"):
        proc = subprocess.run(["vcgencmd", "get_throttled"], capture_output=True, text=True, timeout=5, check=False)
        text = proc.stdout.strip().partition("=")[2]
    if not text:
        return
    flags = int(text, 16)
    reasons = [reason for bit, reason in THROTTLE_BITS.items() if flags & (1 << bit)]
    if not reasons:
        yield Finding("system", "throttling", "ok", "never throttled since boot")
        return
    yield Finding(
        "system",
        "throttling",
        "warn",
        f"{text}: {', '.join(reasons)}",
        "use the official power supply (27 W on a Pi 5, 15 W on a Pi 4) and a heatsink or fan; "
        "accelerators on USB draw from the same supply",
    )


def _temperature(root: Path) -> Iterator[Finding]:
    for zone in listed(under("/sys/class/thermal", root), "thermal_zone*"):
        raw = read_text(zone / "temp")
        if not raw.lstrip("-").isdigit():
            continue
        celsius = int(raw) / 1000
        kind = read_text(zone / "type") or zone.name
        hot = celsius >= HOT_CELSIUS
        fix = "add a heatsink or fan; the CPU slows itself down above 80-85 °C" if hot else None
        yield Finding("system", kind, "warn" if hot else "ok", f"{celsius:.1f} °C", fix)


def check_models(settings: Settings) -> Iterator[Finding]:
    cache = settings.model_cache
    if not _writable(cache):
        fix = "set EDGE_MODEL_CACHE to a folder this user may write"
        yield Finding("models", str(cache), "fail", "the model cache cannot be written", fix)
    else:
        yield Finding("models", str(cache), "ok", "model cache writable")
    for entry in REGISTRY.values():
        if not is_cached(entry, cache):
            continue
        try:
            check_cached(entry, cache)
        except ModelError as exc:
            yield Finding("models", entry.name, "fail", str(exc), f"edge models pull {entry.name}")
            continue
        yield Finding("models", entry.name, "ok", "cached and matches the registry's checksum")
    source = settings.model_mirror or "the internet (set EDGE_MODEL_MIRROR for a local mirror)"
    yield Finding("models", "downloads", "info", f"missing registry models come from {source}")


def _writable(folder: Path) -> bool:
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    return existing is not None and existing.is_dir() and os.access(existing, os.W_OK)


def check_servers(references: list[str]) -> Iterator[Finding]:
    """Each inference server named (`--server triton://HOST:PORT/MODEL`): it answers with the model ready, or not."""
    from edge_inference.backends.base import BackendError
    from edge_inference.backends.engine import serving_engine

    for reference in references:
        engine = serving_engine(reference)
        if engine is None or engine.reach is None:
            yield Finding("servers", reference, "warn", "not a server's model", "write triton://HOST:PORT/MODEL")
            continue
        try:
            yield Finding("servers", reference, "ok", engine.reach(reference))
        except BackendError as exc:
            fix = "start the server (tritonserver --model-repository DIR) or correct the address and model name"
            yield Finding("servers", reference, "warn", str(exc), fix)


def run_checks(settings: Settings, user: str | None = None, servers: list[str] | None = None) -> list[Finding]:
    root = system_root()
    account = Account.named(user)
    return [
        *check_engines(),
        *check_edgetpu_runtime(),
        *check_engine_deaths(settings),
        *check_devices(root),
        *check_permissions(root, account),
        *check_cameras(root),
        *check_decoders(root),
        *check_system(root),
        *check_models(settings),
        *check_servers(servers or []),
        *_not_allowed(root),
    ]


def _not_allowed(root: Path) -> Iterator[Finding]:
    """Places this user may not look at (debugfs is root's alone): what they would show is not known, and said."""
    places = sorted({f"/{Path(p).relative_to(root)}" if Path(p).is_relative_to(root) else p for p in NOT_ALLOWED})
    if places:
        yield Finding(
            "permissions",
            "cannot tell",
            "info",
            f"this user may not look in {', '.join(places)}: what they hold is not known here",
            "run `sudo edge doctor` to look there too",
        )


def blocks_serving(findings: list[Finding]) -> bool:
    return any(f.status == "fail" for f in findings)
