"""A GPU build of ONNX Runtime and the CUDA and cuDNN libraries it needs, loaded before any session asks for them.

onnxruntime-gpu links CUDA's libraries by name only (no search path of its own): in a virtual environment with
NVIDIA's pip packages (`pip install 'onnxruntime-gpu[cuda,cudnn]'`) they are found only after the runtime's own
`preload_dlls()` loads them from there (1.31.1 with those wheels, seen here: without it the provider could not find
libcublasLt.so.13 and the session ran on the CPU; with it only the driver was missing). Where CUDA is on the loader's
path (a CUDA toolkit, JetPack) it is found either way. `preload_dlls` prints what it cannot load on stdout, where
`edge detect --json` writes its answer: what it says is kept here for the message instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import io
import re
import warnings
from typing import Any

NVIDIA_DRIVER = "libcuda.so.1"  # installed with the driver, not with CUDA: a machine without one has no NVIDIA GPU
# onnxruntime-gpu 1.21-1.31 (`onnxruntime/__init__.py`, preload_dlls): "Failed to load {path}: {error}"
_FAILED = re.compile(r"^Failed to load (\S+?):? ")


def cuda_build(ort: Any) -> str:
    """The CUDA version a GPU build of ONNX Runtime was built for ('13.0'), or '' for a CPU build."""
    return str(getattr(ort, "cuda_version", "") or "")


def missing_cuda_libraries() -> tuple[str, ...]:
    """Loads a GPU build's CUDA and cuDNN libraries (once); the file names of those that could not be loaded,
    the NVIDIA driver's own library first."""
    import onnxruntime as ort

    if not cuda_build(ort):
        return ()
    driver = () if _loads(NVIDIA_DRIVER) else (NVIDIA_DRIVER,)
    if not hasattr(ort, "preload_dlls"):  # before 1.21: the libraries are wherever the loader finds them
        return driver
    return driver + _preload(ort.preload_dlls)


@functools.cache
def _loads(library: str) -> bool:
    try:
        ctypes.CDLL(library)
    except OSError:
        return False
    return True


@functools.cache
def _preload(preload_dlls: Any) -> tuple[str, ...]:
    said = io.StringIO()
    with contextlib.redirect_stdout(said), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            preload_dlls()
        except (OSError, RuntimeError) as exc:  # a folder it was told to look in that is not there
            said.write(f"Failed to load CUDA: {exc}\n")
    names = (_FAILED.match(line) for line in said.getvalue().splitlines())
    return tuple(dict.fromkeys(match.group(1).rsplit("/", 1)[-1] for match in names if match))


def cuda_libraries_problem(ort: Any, missing: tuple[str, ...]) -> str:
    """What to do when a GPU build's libraries are not there: one sentence, naming what is missing."""
    major = cuda_build(ort).split(".")[0]
    build = f"ONNX Runtime {ort.__version__} is a GPU build for CUDA {major}"
    if missing[0] == NVIDIA_DRIVER:
        return (
            f"{build}, but this machine has no NVIDIA driver ({NVIDIA_DRIVER} not found): CUDA runs on an NVIDIA GPU "
            "with its driver installed (nvidia-smi lists the GPU)"
        )
    return (
        f"{build}, but its CUDA libraries are not installed here ({', '.join(missing)} not found). Install them "
        f"beside it: pip install 'onnxruntime-gpu[cuda,cudnn]' (NVIDIA's CUDA {major} and cuDNN 9 wheels), or put "
        f"CUDA {major} and cuDNN 9 on LD_LIBRARY_PATH"
    )
