"""The Edge TPU's runtime pair: libedgetpu and the TFLite runtime it is loaded into must match.

libedgetpu is a TFLite delegate built against one TensorFlow's TFLite C API. Coral's own apt packages
(`libedgetpu1-std`/`-max` 16.0, 2021) were built against TF 2.5; the libedgetpu maintainer reports crashes with TFLite
runtimes newer than 2.11 (google-coral/edgetpu#812). The maintained community builds (feranick/libedgetpu, what
Frigate installs) name the TensorFlow they were built against in their version: `16.0tf2.17.1-1.bookworm`, to be
used with the TFLite runtime of that same version.

`KNOWN_PAIRS` is the one source of truth: the Coral page's first block, the engine's install line, `edge doctor` and
the check at load read it.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Literal

LIBRARIES = {"Linux": "libedgetpu.so.1", "Darwin": "libedgetpu.1.dylib", "Windows": "edgetpu.dll"}


def delegate_library() -> str:
    """The Edge TPU delegate's library this machine loads (EDGE_LIBEDGETPU: another build, a stand-in in tests)."""
    return os.environ.get("EDGE_LIBEDGETPU") or LIBRARIES.get(platform.system(), "libedgetpu.so.1")


PACKAGES = ("libedgetpu1-std", "libedgetpu1-max")
NEWEST_WITH_CORAL_APT = (2, 11)  # newer runtimes crash with Coral's own 16.0 (google-coral/edgetpu#812)
_BUILT_FOR = re.compile(r"tf(\d+)\.(\d+)")
RUNTIMES = ("tflite-runtime", "ai-edge-litert")
# Ops the Edge TPU compiler leaves on the CPU by design in Coral's own models: no TPU op exists for them
CPU_BY_DESIGN = {"TFLite_Detection_PostProcess"}
EDGETPU_OP = "edgetpu-custom-op"
CORAL_PAGE = "docs/hardware/coral.md"


@dataclass(frozen=True)
class KnownPair:
    """A libedgetpu and a TFLite runtime known to work together, and the commands that install them beside the
    service (None where the service cannot run beside that runtime: `why_not` says why)."""

    systems: str
    libedgetpu: str  # the package's version as dpkg has it, without the packaging suffix: "16.0tf2.17.1"
    runtime: str  # "tflite-runtime 2.17.1", as pip names it
    install: tuple[str, ...] | None
    why_not: str = ""


_FERANICK = "https://github.com/feranick"
BOOKWORM = KnownPair(
    systems="Raspberry Pi OS bookworm (arm64) and Debian 12 (x86-64)",
    libedgetpu="16.0tf2.17.1",
    runtime="tflite-runtime 2.17.1",
    install=(
        "sudo apt install -y curl python3-venv",
        "ARCH=$(dpkg --print-architecture)  # arm64 on a Pi, amd64 on a PC",
        f"curl -fLO {_FERANICK}/libedgetpu/releases/download/16.0TF2.17.1-1/"
        "libedgetpu1-std_16.0tf2.17.1-1.bookworm_$ARCH.deb",
        "sudo apt install ./libedgetpu1-std_16.0tf2.17.1-1.bookworm_$ARCH.deb  # its udev rule too: replug the TPU",
        "python3 -m venv ~/edge",
        # the wheels' homes as Frigate's install_deps.sh has them: feranick's for arm64, Frigate's own for x86-64
        "WHEELS=$([ $ARCH = arm64 ] && echo feranick || echo frigate-nvr)",
        # tflite_runtime 2.17 is built against NumPy 1.x (TensorFlow supports NumPy 2 from 2.18); Frigate pins 1.26
        "~/edge/bin/pip install './edge-inference[tflite]' 'numpy<2' https://github.com/$WHEELS/TFlite-builds/"
        "releases/download/v2.17.1/tflite_runtime-2.17.1-cp311-cp311-linux_$(uname -m).whl",
    ),
)
BULLSEYE = KnownPair(
    systems="Debian 11 and Raspberry Pi OS bullseye",
    libedgetpu="16.0",  # Coral's own, from its apt repository
    runtime="tflite-runtime 2.5.0.post1",
    install=None,
    why_not="tflite_runtime 2.5.0.post1 has wheels for Python 3.9 and older, and edge-inference needs 3.10 or newer: "
    "on bullseye, move to bookworm (Raspberry Pi OS bookworm, Debian 12) and install its pair",
)
KNOWN_PAIRS = (BOOKWORM, BULLSEYE)
INSTALL_PAIR = (
    f"install a known-good libedgetpu + tflite_runtime pair: on {BOOKWORM.systems}, feranick's libedgetpu1-std "
    f"{BOOKWORM.libedgetpu} with {BOOKWORM.runtime.replace('-', '_')} (what Frigate installs; the commands are in "
    f"{CORAL_PAGE})"
)


@dataclass(frozen=True)
class PairVerdict:
    kind: Literal["good", "bad", "unknown"]
    line: str | None  # what is wrong (bad) or unchecked (unknown), with the fix


def _package_version(package: str) -> str:
    return package.partition(" ")[2]


def is_known_pair(pair: KnownPair, package: str, runtime: str) -> bool:
    have = _package_version(package)
    return (have == pair.libedgetpu or have.startswith(pair.libedgetpu + "-")) and runtime == pair.runtime


def pair_verdict(package: str | None, runtime: str | None) -> PairVerdict:
    """A known-good pair, a known-bad one (with doctor's line), or one nobody checked (loaded with a warning)."""
    if package is not None and runtime is not None:
        if any(is_known_pair(pair, package, runtime) for pair in KNOWN_PAIRS):
            return PairVerdict("good", None)
        problem = pair_problem(package, runtime)
        if problem and known_to_crash(package, runtime):
            return PairVerdict("bad", problem)
        if problem:
            return PairVerdict("unknown", f"{problem} (a pair not known to work)")
    library = package or "a libedgetpu that dpkg does not know (built by hand, or EDGE_LIBEDGETPU)"
    return PairVerdict(
        "unknown",
        f"{library} with {runtime or 'an unknown TFLite runtime'} is not a pair known to work: if the Edge TPU "
        f"engine crashes, {INSTALL_PAIR}",
    )


def runtime_named(engine: str) -> str:
    """`import_litert`'s engine ("tflite_runtime 2.17.1") as pip names the distribution ("tflite-runtime 2.17.1")."""
    name, _, number = engine.partition(" ")
    return f"{name.replace('_', '-')} {number}".strip()


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
    have = _major_minor(runtime_number)
    if have is None:
        return None
    built = _BUILT_FOR.search(package)
    if built is None:
        if not coral_own(package):
            return None  # a build whose TF nobody can tell: unchecked
        if name == "ai-edge-litert" or have > NEWEST_WITH_CORAL_APT:
            return (
                f"{package} (Coral's own, built for TF 2.5) crashes with TFLite runtimes newer than 2.11 "
                f"(google-coral/edgetpu#812), and the runtime is {runtime}: {INSTALL_PAIR}"
            )
        return None
    built_for = f"{built[1]}.{built[2]}"
    if name == "ai-edge-litert":
        return (
            f"{package} was built for TF {built_for}'s TFLite, and the delegate is loaded into {runtime}, whose TFLite "
            f"is another: install the matching tflite_runtime ({built_for}.x, feranick's wheel) beside it, which the "
            "engine then prefers"
        )
    if (int(built[1]), int(built[2])) != have:
        return (
            f"{package} was built for TF {built_for} and the runtime is {runtime}: install tflite_runtime "
            f"{built_for}.x, or the libedgetpu build for TF {have[0]}.{have[1]}"
        )
    return None


def coral_own(package: str) -> bool:
    """Coral's own packages are numbered plainly ("16.0", "15.0"); community builds add the TF they were built
    for ("16.0tf2.17.1-1.bookworm") or another mark."""
    return re.fullmatch(r"\d+(\.\d+)*", _package_version(package)) is not None


def known_to_crash(package: str, runtime: str) -> bool:
    """Coral's own libedgetpu in a runtime newer than 2.11: the crash google-coral/edgetpu#812 reports. A community
    build beside another TF's runtime is only unchecked."""
    return coral_own(package) and pair_problem(package, runtime) is not None


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
