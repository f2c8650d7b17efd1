"""The basic install (`pip install .`, no extras) in a new venv, at the cost of installing the project alone.

Its dependencies (onnxruntime, OpenCV, numpy, FastAPI...) are installed once per machine into a venv of their own,
kept in a cache keyed by what it holds: the Python and the `dependencies` of pyproject.toml. A new venv for a test
reaches them through a .pth line and gets the project from pip as a user's would: pip finds every dependency
already satisfied there, so a dependency the code needs but pyproject does not list still fails as it would for a
user (the layer holds only what pyproject lists). A change of the dependencies, or of the Python, makes a new layer.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("EDGE_TEST_CACHE", Path.home() / ".cache" / "edge-inference")) / "base-venvs"
# For a venv another user runs (`nobody`): root's home is closed to them, so the layer lives where any user may read.
OPEN_CACHE = Path(os.environ.get("EDGE_TEST_OPEN_CACHE", "/var/tmp/edge-inference-tests")) / "base-venvs"


def base_dependencies() -> list[str]:
    return list(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])


def _site_packages(python: Path) -> str:
    ask = [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    return subprocess.run(ask, capture_output=True, text=True, check=True).stdout.strip()


def dependency_layer(python: str = sys.executable, cache: Path = CACHE) -> Path:
    """The site-packages of a cached venv of `python` holding the base dependencies alone; made where missing."""
    version = subprocess.run([python, "-VV"], capture_output=True, text=True, check=True).stdout.strip()
    held = json.dumps([os.path.realpath(python), version, platform.machine(), sorted(base_dependencies())])
    folder = cache / hashlib.sha256(held.encode()).hexdigest()[:16]
    layer_python = folder / "bin" / "python"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "make.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one maker at a time: test workers, two runs on one machine
        if not (folder / "complete").exists():
            shutil.rmtree(folder, ignore_errors=True)  # a half-made one, from a run that was killed
            subprocess.run([python, "-m", "venv", str(folder)], check=True, timeout=300)
            install = [str(layer_python), "-m", "pip", "install", "--quiet", *base_dependencies()]
            done = subprocess.run(install, capture_output=True, text=True, timeout=900, check=False)
            if done.returncode != 0:
                shutil.rmtree(folder, ignore_errors=True)
                raise RuntimeError(f"pip could not install the base dependencies: {done.stderr[-2000:]}")
            (folder / "held.json").write_text(held)
            (folder / "complete").write_text("")
    return Path(_site_packages(layer_python))


def basic_install(
    home: Path, source: Path, python: str = sys.executable, cache: Path = CACHE
) -> subprocess.CompletedProcess[str]:
    """A new venv at `home` on the cached dependencies, and `pip install SOURCE` into it (pip's own answer)."""
    layer = dependency_layer(python, cache)
    subprocess.run([python, "-m", "venv", "--without-pip", str(home)], check=True, timeout=120)
    # A .pth line adds the folder without running the .pth files in it: the layer's own are none of the project's.
    (Path(_site_packages(home / "bin" / "python")) / "edge-base-dependencies.pth").write_text(f"{layer}\n")
    install = [sys.executable, "-m", "pip", "--python", str(home / "bin" / "python"), "install", "--quiet", str(source)]
    return subprocess.run(install, capture_output=True, text=True, timeout=900, check=False)
