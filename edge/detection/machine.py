"""One line describing the machine, for benchmark output."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def describe_machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model")):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        import psutil

        memory = f", {psutil.virtual_memory().total / 2**30:.0f} GiB"
    except ImportError:
        pass
    system = f"{platform.system()} {platform.release()} {platform.machine()}"
    return f"{cpu}, {os.cpu_count()} cores{memory}, {system}, Python {platform.python_version()}"
