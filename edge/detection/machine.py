"""One line describing the machine: for benchmark output, and (less its Python) the machine `auto` measured on."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

from edge_inference.backends.hardware import read_text, under
from edge_inference.edge.detection.timings import process_cpu_seconds

# The vector instructions engines choose their kernels by. A cloud VM keeps its model name ("AMD EPYC") on hosts
# with and without AVX-512, and int8 LiteRT ran 4x slower on one without it, reordering the engines (BENCHMARKS.md);
# a Pi 5's Cortex-A76 has the dot product (asimddp) that a Pi 4's A72 lacks.
KERNEL_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_int8",
    "asimddp",
    "i8mm",
    "sve",
)


def cpu_model_and_flags() -> tuple[str, list[str]]:
    """The CPU's model name (x86 `model name`, a Pi's `Model`) and which of KERNEL_FLAGS it has, from
    /proc/cpuinfo under the system root (EDGE_SYSROOT: a fake machine in tests)."""
    model, flags = "", set[str]()
    for line in read_text(under("/proc/cpuinfo")).splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model") and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return model or platform.processor() or platform.machine(), [f for f in KERNEL_FLAGS if f in flags]


def describe_machine() -> str:
    cpu, flags = cpu_model_and_flags()
    if flags:
        cpu = f"{cpu} ({' '.join(flags)})"
    memory = ""
    try:
        import psutil

        memory = f", {psutil.virtual_memory().total / 2**30:.0f} GiB"
    except ImportError:
        pass
    system = f"{platform.system()} {platform.release()} {platform.machine()}"
    return f"{cpu}, {os.cpu_count()} cores{memory}, {system}, Python {platform.python_version()}"


def machine_busy_seconds() -> float | None:
    """CPU seconds all cores together have spent busy since boot (/proc/stat's first line: all but idle and iowait,
    a VM's stolen time included); None where it cannot be read."""
    fields = read_text(Path("/proc/stat")).split("\n", 1)[0].split()
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


class OthersLoad:
    """How many cores other programs kept busy from its start until `cores()`: the machine's busy time less this
    process's and its children's. `--backend auto` keeps it with a measurement: a pick timed while the machine was
    busy (a Pi measures at boot, when everything else starts too) is timed again once it is quiet (issue 62)."""

    def __init__(self) -> None:
        self._start = (time.monotonic(), machine_busy_seconds(), process_cpu_seconds())

    def cores(self) -> float | None:
        then, busy_then, own_then = self._start
        busy = machine_busy_seconds()
        if busy is None or busy_then is None:
            return None
        others = (busy - busy_then) - (process_cpu_seconds() - own_then)
        return max(others, 0.0) / max(time.monotonic() - then, 1e-3)
