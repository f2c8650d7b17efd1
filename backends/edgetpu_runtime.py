"""The Edge TPU's runtime pair: libedgetpu and the TFLite runtime it is loaded into must match.

libedgetpu is a TFLite delegate built against one TensorFlow's TFLite C API. Coral's own apt packages
(`libedgetpu1-std`/`-max` 16.0, 2021) were built against TF 2.5; the libedgetpu maintainer reports crashes with TFLite
runtimes newer than 2.11 (google-coral/edgetpu#812). The maintained community builds (feranick/libedgetpu, what
Frigate installs) name the TensorFlow they were built against in their version: `16.0tf2.17.1-1.bookworm`, to be
used with the TFLite runtime of that same version.

Known-good pairs (docs/hardware/coral.md):
- Raspberry Pi OS bookworm (arm64) and Debian 12 (x86-64): feranick's `libedgetpu1-std 16.0tf2.17.1` with
  `tflite_runtime 2.17.1` (feranick's wheel; Frigate pins this pair);
- Debian 11 / Pi OS bullseye with Python 3.9: Coral's `libedgetpu1-std 16.0` with `tflite_runtime 2.5.0.post1`.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGES = ("libedgetpu1-std", "libedgetpu1-max")
CORAL_APT_TF = (2, 5)  # what Coral's own 16.0 packages were built against
NEWEST_WITH_CORAL_APT = (2, 11)  # newer runtimes crash with them (google-coral/edgetpu#812)
_BUILT_FOR = re.compile(r"tf(\d+)\.(\d+)")
RUNTIMES = ("tflite-runtime", "ai-edge-litert")
# Ops the Edge TPU compiler leaves on the CPU by design in Coral's own models: no TPU op exists for them
CPU_BY_DESIGN = {"TFLite_Detection_PostProcess"}
EDGETPU_OP = "edgetpu-custom-op"


@dataclass(frozen=True)
class RuntimePair:
    package: str | None  # "libedgetpu1-std 16.0tf2.17.1-1.bookworm", as dpkg has it
    build: str | None  # what the library itself says (edgetpu_version())
    runtime: str | None  # "tflite-runtime 2.17.1" or "ai-edge-litert 1.2.0"


def library_build(library: str) -> str | None:
    """libedgetpu's own build line (its C API's `edgetpu_version()`), or None where it cannot be loaded."""
    try:
        lib = ctypes.CDLL(library)
        lib.edgetpu_version.restype = ctypes.c_char_p
        said = lib.edgetpu_version()
    except (OSError, AttributeError):
        return None
    return said.decode(errors="replace") if said else None


def installed_package() -> str | None:
    """The libedgetpu Debian package and its version, where dpkg knows one."""
    if shutil.which("dpkg-query") is None:
        return None
    for package in PACKAGES:
        try:
            found = subprocess.run(
                ["dpkg-query", "-W", "-f", "${Status} ${Version}", package], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        words = found.stdout.split()
        if found.returncode == 0 and "installed" in words[:3] and len(words) >= 4:
            return f"{package} {words[-1]}"
    return None


def runtime_version() -> str | None:
    """The TFLite runtime the engine loads the delegate into (tflite_runtime where it matches, else LiteRT)."""
    for name in RUNTIMES:
        try:
            return f"{name} {version(name)}"
        except PackageNotFoundError:
            continue
    return None


def _major_minor(text: str) -> tuple[int, int] | None:
    found = re.search(r"(\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2])) if found else None


def pair_problem(package: str | None, runtime: str | None) -> str | None:
    """What is wrong with this libedgetpu beside this TFLite runtime, with the fix; None where it is a known-good
    pair or where either is unknown."""
    if package is None or runtime is None:
        return None
    name, _, runtime_number = runtime.partition(" ")
    wanted = _BUILT_FOR.search(package)
    have = _major_minor(runtime_number)
    if have is None:
        return None
    if name == "ai-edge-litert":
        built = f"TF {wanted[1]}.{wanted[2]}" if wanted else "TF 2.5 (Coral's own package)"
        return (
            f"{package} was built for {built}'s TFLite, and the delegate is loaded into {runtime}, whose TFLite is "
            f"newer: install the matching tflite_runtime beside it (pip install tflite-runtime=="
            f"{wanted[1] + '.' + wanted[2] if wanted else '2.5.0.post1'}), which the engine then prefers"
        )
    if wanted is not None:
        built_for = (int(wanted[1]), int(wanted[2]))
        if built_for != have:
            return (
                f"{package} was built for TF {built_for[0]}.{built_for[1]} and the runtime is {runtime}: install "
                f"tflite_runtime {built_for[0]}.{built_for[1]}.x, or the libedgetpu build for TF {have[0]}.{have[1]}"
            )
        return None
    if have > NEWEST_WITH_CORAL_APT:
        return (
            f"{package} (Coral's own, built for TF 2.5) crashes with TFLite runtimes newer than 2.11 "
            f"(google-coral/edgetpu#812), and the runtime is {runtime}: install feranick's libedgetpu "
            "16.0tf2.17.1 with tflite_runtime 2.17.1, as Frigate does"
        )
    return None


def operations(path: Path) -> Counter[str] | None:
    """Every operation of a .tflite graph by name (a compiled model's Edge TPU parts as `edgetpu-custom-op`), read
    without the delegate; None where LiteRT cannot read the file."""
    from edge_inference.backends.tflite_backend import import_litert

    interpreter_cls, _, _ = import_litert()
    try:
        details = interpreter_cls(model_path=str(path))._get_ops_details()
    except (ValueError, RuntimeError, AttributeError):
        return None
    return Counter(d["op_name"] for d in details)


def cpu_operations(path: Path) -> Counter[str]:
    """Operations of a compiled model that run on the CPU beside the Edge TPU's (the compiler could not map them);
    those Coral leaves there by design are not counted."""
    found = operations(path) or Counter()
    return Counter({name: n for name, n in found.items() if name != EDGETPU_OP and name not in CPU_BY_DESIGN})


def operations_split(path: Path) -> str:
    """What of a .tflite runs where, in one line: the Edge TPU's compiled segments, the operations the compiler
    could not map (each frame waits for them on the CPU), and those left on the CPU by design."""
    found = operations(path)
    if found is None:
        return f"LiteRT cannot read {path.name}'s operations"
    segments = found.pop(EDGETPU_OP, 0)
    by_design = sum(found.pop(name, 0) for name in CPU_BY_DESIGN)
    listed = ", ".join(f"{name} x{count}" if count > 1 else name for name, count in found.most_common())
    if not segments:
        return f"not compiled for the Edge TPU: all {sum(found.values()) + by_design} operations run on the CPU"
    tpu = f"{segments} Edge TPU segment{'s' if segments > 1 else ''}"
    cpu = f"{sum(found.values())} operations fall back to the CPU ({listed})" if found else "none falls back"
    design = f"; {by_design} on the CPU by design (the SSD's post-processing)" if by_design else ""
    return f"{tpu}; {cpu}{design}"


def cpu_operations_note(path: Path) -> str | None:
    ops = cpu_operations(path)
    if not ops:
        return None
    listed = ", ".join(f"{name} x{count}" if count > 1 else name for name, count in ops.most_common())
    return (
        f"{sum(ops.values())} operations of {path.name} run on the CPU beside the Edge TPU ({listed}): the compiler "
        "could not map them (edgetpu_compiler's log says why); each frame waits for them and their copies"
    )
