"""How much memory the process may still take, and what it holds: how many lanes of an engine the memory holds.

LiteRT loads an interpreter per lane (an interpreter is not thread-safe), and each copy holds the model's repacked
weights and its own activations: +26 to +33 MiB a lane on yolox-nano and yolov8n int8, more on a larger model.
ONNX Runtime and OpenVINO share one loaded model between lanes, and each lane running at once holds one more
inference's working memory: +4 to +25 MiB a lane on these models, more at a higher resolution
(`python -m benchmarks.lanes_memory`). A 4-core board with little memory, or a container with a memory limit, would
have the kernel kill the whole service for lanes it did not need; it gets the lanes its memory holds instead
(`DetectorPool`, which also gives the lanes kept the threads of those held back).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from pathlib import Path

MIB = 2**20
# Left free after the last lane: frames in flight, decoders, the service and the rest of the system.
RESERVE_BYTES = 64 * MIB
# A LiteRT copy's first inferences add to what it holds once loaded: 19.9 -> 26 MiB on yolox-nano fp16,
# 28.8 -> 33 on yolov8n int8, 17.5 -> 19 on SSD MobileNet v2 (resident memory, x86_64).
RUN_GROWTH = 1.3
PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_MOUNT = Path("/sys/fs/cgroup")


def meminfo_available(path: Path = Path("/proc/meminfo")) -> int | None:
    """The kernel's estimate of memory available without swapping (`MemAvailable`), in bytes."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


# cgroup v2 and v1 names: the limit, the usage, the stat line of page cache the kernel reclaims before it kills.
_CGROUP_FILES = (
    ("memory.max", "memory.current", "inactive_file"),
    ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
)
_UNLIMITED = 2**60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1


def cgroup_memory_headroom(proc_cgroup: Path = PROC_CGROUP, mount: Path = CGROUP_MOUNT) -> int | None:
    """What this process's memory cgroups still allow, in bytes: the least, over its cgroup and the ones above it
    that have a limit, of the limit less the usage, page cache the kernel would reclaim first not counted (as
    `docker stats` counts). cgroup v2 (Raspberry Pi OS, JetPack 6) and v1 (JetPack 5); None without a limit."""
    headrooms = [room for folder in _own_cgroups(proc_cgroup, mount) if (room := _headroom(folder)) is not None]
    return min(headrooms) if headrooms else None


def own_memory_cgroup() -> Path | None:
    """This process's own memory cgroup folder (v1 or v2), where one is mounted."""
    folders = _own_cgroups(PROC_CGROUP, CGROUP_MOUNT)
    return folders[0] if folders else None


def _own_cgroups(proc_cgroup: Path, mount: Path) -> list[Path]:
    """This process's memory cgroup folder and those above it, up to the mount; inside a container, whose view of
    /sys/fs/cgroup starts at its own cgroup, the mount's top folder."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    tops = {"memory": mount / "memory", "": mount}  # v1's memory controller first, else v2's unified line
    relatives: dict[str, str] = {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            relatives.update((controller, parts[2]) for controller in parts[1].split(","))
    for controller, top in tops.items():
        if controller in relatives and top.is_dir():
            folder = top / relatives[controller].lstrip("/")
            folder = folder if folder.is_dir() else top
            return [folder, *[parent for parent in folder.parents if parent.is_relative_to(top)]]
    return [top for top in tops.values() if top.is_dir()][:1]


def _headroom(folder: Path) -> int | None:
    for limit_name, usage_name, cache_name in _CGROUP_FILES:
        try:
            limit_text = (folder / limit_name).read_text().strip()
            usage = int((folder / usage_name).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit_text == "max" or not limit_text.isdigit() or int(limit_text) >= _UNLIMITED:
            return None
        return max(int(limit_text) - max(usage - _stat(folder / "memory.stat", cache_name), 0), 0)
    return None


def _stat(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def available_memory() -> int | None:
    """Bytes this process may still allocate: the machine's available memory, capped by its container's limit."""
    known = [figure for figure in (meminfo_available(), cgroup_memory_headroom()) if figure is not None]
    return min(known) if known else None


def return_free_memory() -> None:
    """Hand the memory this process has freed back to the system: glibc's heap (`malloc_trim`) and, where OpenVINO
    loaded it, TBB's allocator's caches (`TBBMALLOC_CLEAN_ALL_BUFFERS`, 0). What an engine then allocates shows
    in the resident memory as it is touched, instead of reusing pages a closed engine left (a reload read +0 MiB
    for the 10 MiB yolox-nano's first inference takes on ONNX Runtime)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # glibc only (not musl)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libtbbmalloc.so.2", mode=os.RTLD_NOLOAD).scalable_allocation_command(0, None)


def settled_rss() -> int | None:
    """The resident memory once what was freed has gone back to the system: where growth from it is measured."""
    return_free_memory()
    return process_rss()


def process_rss() -> int | None:
    """This process's resident memory in bytes (`/proc/self/statm`), or None where there is no /proc."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def lane_bytes(loaded_bytes: int) -> int:
    """What a lane will hold once it has run, from what its copy took to load."""
    return int(loaded_bytes * RUN_GROWTH)


def lane_fits(available: int | None, loaded_bytes: int, reserve: int = RESERVE_BYTES) -> bool:
    """Whether another lane, whose copy takes `loaded_bytes` to load, leaves `reserve` free once it has run; an
    unknown figure never holds a lane back."""
    return available is None or available - lane_bytes(loaded_bytes) >= reserve


def shared_lanes_fitting(available: int | None, lane: int, wanted: int, reserve: int = RESERVE_BYTES) -> int:
    """Lanes of one loaded model shared between threads that the memory holds: the first (already run, so already
    counted in `available`) and each further one at `lane` bytes, one inference's working memory, while `reserve`
    stays free. All of them where either figure is unknown."""
    if available is None or lane <= 0:
        return wanted
    return max(1, min(wanted, 1 + (available - reserve) // lane))
