"""Vendors' conversion toolchains that cannot share the service's environment, each in a venv of its own.

Rockchip's rknn-toolkit2 pins numpy<=1.26.4 and torch<=2.4.0 and imports torch at start: beside the service it
would downgrade numpy under OpenCV and ONNX Runtime. It gets a venv of its own under `EDGE_TOOLCHAINS`
(~/.cache/edge-inference/toolchains), made once by pip from this machine's own index, so `PIP_INDEX_URL`,
`PIP_FIND_LINKS` or a pip.conf pointing at a mirror folder serve it too; several GB with torch. A venv counts as
made once its marker is written, after pip succeeded: an interrupted install is made again, never used half-made.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import Settings
from edge_inference.edge.tools.folders import ensure_writable

MARKER = "edge-toolchain-ready"


@dataclass(frozen=True)
class Toolchain:
    name: str
    version: str
    packages: tuple[str, ...]
    machines: tuple[str, ...]  # platform.machine() values its wheels exist for
    needs_gib: float  # free space its venv takes once made, with pip's unpacking room (measured: du of the venv)

    @property
    def folder_name(self) -> str:
        return f"{self.name}-{self.version}"


RKNN_TOOLKIT = Toolchain("rknn-toolkit2", "2.5.0", ("rknn-toolkit2==2.5.0",), ("x86_64", "AMD64"), 7.0)  # 5.6 GB
# onnx2tf pins TensorFlow 2.19, numpy 1.26.4, onnx and protobuf: its own venv too (2.6 GB)
ONNX2TF = Toolchain("onnx2tf", "1.29.24", ("onnx2tf==1.29.24",), ("x86_64", "AMD64", "aarch64"), 3.5)


def toolchain_folder(toolchain: Toolchain, settings: Settings) -> Path:
    return settings.toolchains / toolchain.folder_name


def toolchain_ready(toolchain: Toolchain, settings: Settings) -> bool:
    try:
        return (toolchain_folder(toolchain, settings) / MARKER).is_file()
    except PermissionError:  # another user's folder (root's 0700 home): not made for this user
        return False


def toolchain_can_be_made(toolchain: Toolchain, settings: Settings) -> None:
    """Said before any footage is read: a machine its wheels are not made for, or a disk without room for its venv
    (a half-installed torch would fill it, then fail)."""
    if platform.machine() not in toolchain.machines:
        raise EdgeError(
            f"{toolchain.name}'s wheels are for {', '.join(toolchain.machines)}, not {platform.machine()}: convert "
            "on such a PC and copy the file to the device"
        )
    if toolchain_ready(toolchain, settings):
        return
    folder = toolchain_folder(toolchain, settings)
    free = _free_gib(folder)
    if free is not None and free < toolchain.needs_gib:
        raise EdgeError(
            f"making {toolchain.name}'s environment needs about {toolchain.needs_gib:.0f} GiB free in {folder} "
            f"({free:.1f} GiB free): free some space, or set EDGE_TOOLCHAINS to a folder on another disk"
        )
    try:  # the folder that will hold it (a service user's home may not exist, or be another's)
        ensure_writable(folder.parent)
    except OSError as exc:
        raise EdgeError(
            f"cannot make {toolchain.name}'s environment in {folder.parent} ({exc.strerror}): set EDGE_TOOLCHAINS "
            "to a folder this user can write"
        ) from None


def _free_gib(folder: Path) -> float | None:
    """Free space on the disk `folder` will be made on (its nearest folder that exists), or None where this user
    cannot look (inside another user's home: the folder cannot be made there, which is said next)."""
    try:
        existing = next(parent for parent in folder.parents if parent.exists())
        return shutil.disk_usage(existing).free / 2**30
    except PermissionError:
        return None


def toolchain_python(toolchain: Toolchain, settings: Settings, say: Callable[[str], None]) -> Path:
    """The toolchain's own interpreter, its venv made first where it is not yet; a failed install is removed, so
    nothing half-made is left taking GBs."""
    toolchain_can_be_made(toolchain, settings)
    folder = toolchain_folder(toolchain, settings)
    python = folder / "bin" / "python"
    if toolchain_ready(toolchain, settings) and python.is_file():
        return python
    say(f"making {toolchain.name}'s own environment in {folder} (once; about {toolchain.needs_gib:.0f} GiB)...")
    install = [str(python), "-m", "pip", "install", "--progress-bar", "off", *toolchain.packages]
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True, capture_output=True)
        done = _installed(install, say)
    except (OSError, subprocess.CalledProcessError) as exc:
        shutil.rmtree(folder, ignore_errors=True)
        said = getattr(exc, "stderr", None) or b""
        last = (said.decode(errors="replace").strip().splitlines() or [str(exc)])[-1]
        raise EdgeError(f"cannot make a venv in {folder}: {last}") from None
    except BaseException:  # interrupted: the next conversion makes it again
        shutil.rmtree(folder, ignore_errors=True)
        raise
    if done.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        last = (done.stdout.strip().splitlines() or ["pip failed"])[-1]
        raise EdgeError(f"installing {toolchain.name} failed ({last}); the command was: {' '.join(install)}")
    (folder / MARKER).write_text(" ".join(toolchain.packages) + "\n", encoding="utf-8")
    return python


PIP_STEPS = ("Collecting", "Installing collected", "Successfully installed")  # pip's lines that say how far it is


def _installed(install: list[str], say: Callable[[str], None]) -> subprocess.CompletedProcess[str]:
    """pip run with its steps said as they come (minutes, GBs: the long step of a first conversion), the rest kept
    for the line that says why it failed."""
    lines: list[str] = []
    with subprocess.Popen(install, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as pip:
        assert pip.stdout is not None
        for line in pip.stdout:
            lines.append(line)
            if line.startswith(PIP_STEPS):
                say(f"  {line.rstrip()[:160]}")
    return subprocess.CompletedProcess(install, pip.returncode, "".join(lines[-50:]), "")
