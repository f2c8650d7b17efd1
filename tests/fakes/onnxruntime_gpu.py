"""ONNX Runtime as a GPU build (onnxruntime-gpu with TensorRT, as on a Jetson) would take a session's providers.

`install(monkeypatch)` makes the installed onnxruntime report the TensorRT, CUDA and CPU providers and records what a
session asks for, normalised by ONNX Runtime's own Python layer (`check_and_normalize_provider_args`, which turns
every option value into a string, as the C++ providers receive them). `get_providers` answers what was asked for, as
a GPU build does when every provider starts; the inference itself runs on the CPU provider of the installed runtime.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import onnxruntime as ort
from onnxruntime.capi.onnxruntime_inference_collection import check_and_normalize_provider_args

GPU_PROVIDERS = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
SESSIONS: list[dict[str, Any]] = []  # per session: {"providers": [...], "options": {provider: {...}}}


class RecordingSession(ort.InferenceSession):
    def __init__(self, path: str, sess_options: Any = None, providers: Any = None, **kwargs: Any):
        names, options = check_and_normalize_provider_args(providers, None, GPU_PROVIDERS)
        self._asked = names
        self._asked_options = dict(zip(names, options, strict=True))
        SESSIONS.append({"providers": names, "options": self._asked_options})
        super().__init__(path, sess_options=sess_options, providers=["CPUExecutionProvider"])

    def get_providers(self) -> list[str]:
        return list(self._asked)

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return dict(self._asked_options)


def install(monkeypatch: Any) -> list[dict[str, Any]]:
    SESSIONS.clear()
    monkeypatch.setattr(ort, "get_available_providers", lambda: list(GPU_PROVIDERS))
    monkeypatch.setattr(ort, "InferenceSession", RecordingSession)
    return SESSIONS


# --- onnxruntime-gpu 1.31.1 where a library it needs is not installed ----------------------------------------------
# What that version says, read from its source (onnxruntime/__init__.py: preload_dlls; provider_bridge_ort.cc and
# onnxruntime_pybind_state.cc: the log lines) and seen on a machine with the wheel and no CUDA libraries: preload_dlls
# prints each library it cannot load on stdout; a session asking for a provider whose library does not load logs
# an error and a warning on stderr and runs on the next provider in the list, without raising.
CUDA_13_LIBRARIES = ("libcublasLt.so.13", "libcublas.so.13", "libcurand.so.10")
LOG_LINE = "\x1b[1;31m2026-11-26 14:23:23.161820125 [E:onnxruntime:Default, provider_bridge_ort.cc:2458 operator()] "
PROVIDER_LIBRARY = {"CUDAExecutionProvider": "libonnxruntime_providers_cuda.so"}


def _preload_printing_failures(missing: tuple[str, ...]) -> Any:
    def preload_dlls(cuda: bool = True, cudnn: bool = True, msvc: bool = True, directory: Any = None) -> None:
        for name in missing:
            print(f"Failed to load {name}: {name}: cannot open shared object file: No such file or directory")
        if missing:
            print("Please follow https://onnxruntime.ai/docs/install/#cuda-and-cudnn to install CUDA.")

    return preload_dlls


TENSORRT_MISSING = (  # raised when a session asks for TensorRT and its libraries are not there (seen on an H100)
    "/onnxruntime_src/onnxruntime/python/onnxruntime_pybind_state.cc:729 void onnxruntime::python::"
    "RegisterTensorRTPluginsAsCustomOps(PySessionOptions&, const onnxruntime::ProviderOptions&) Please install "
    "TensorRT libraries as mentioned in the GPU requirements page, make sure they're in the PATH or LD_LIBRARY_PATH, "
    "and that your GPU is supported."
)


def _ignores_enable_fallback() -> bool:
    return tuple(int(n) for n in ort.__version__.split(".")[:2]) < (1, 23)


class SessionDroppingProviders(ort.InferenceSession):
    """A session whose `failing` providers cannot start: TensorRT raises, as 1.31.1 does without TensorRT's
    libraries; CUDA's provider library logs that it cannot load one it needs and is skipped (as it does where no
    preload_dlls loaded them: before 1.21, or with CUDA nowhere the loader looks)."""

    failing: ClassVar[dict[str, str]] = {}  # provider -> the library its own library needs and cannot find

    def __init__(self, path: str, sess_options: Any = None, providers: Any = None, **kwargs: Any):
        names, _ = check_and_normalize_provider_args(providers, None, GPU_PROVIDERS)
        if "TensorrtExecutionProvider" in names and "TensorrtExecutionProvider" in self.failing:
            if not _ignores_enable_fallback():
                raise RuntimeError(TENSORRT_MISSING)
            # before 1.23 `enable_fallback=0` is not read: the wrapper prints this and retries (1.19.2's
            # onnxruntime_inference_collection.py, InferenceSession.__init__ and _create_inference_session)
            fallback = ["CUDAExecutionProvider", "CPUExecutionProvider"] if "CUDAExecutionProvider" in names else []
            print("*************** EP Error ***************")
            print(f"EP Error {TENSORRT_MISSING} when using {providers}")
            print(f"Falling back to {fallback or ['CPUExecutionProvider']} and retrying.")
            print("****************************************")
            names = fallback
        if "CUDAExecutionProvider" in names and "CUDAExecutionProvider" in self.failing:
            library = f"/usr/lib/python3/site-packages/onnxruntime/capi/{PROVIDER_LIBRARY['CUDAExecutionProvider']}"
            os.write(
                2,
                f"{LOG_LINE}/onnxruntime_src/onnxruntime/core/session/provider_bridge_ort.cc:2043 "
                f"onnxruntime::Provider& onnxruntime::ProviderLibrary::Get() [ONNXRuntimeError] : 1 : FAIL : "
                f"Failed to load library {library} with error: {self.failing['CUDAExecutionProvider']}: cannot open "
                f"shared object file: No such file or directory\n\x1b[m\n\x1b[0;93m2026-11-26 14:23:23.161837518 "
                f"[W:onnxruntime:Default, onnxruntime_pybind_state.cc:1295 CreateExecutionProviderFactoryInstance] "
                f"Failed to create CUDAExecutionProvider. Require cuDNN 9.* and CUDA 13.*.\x1b[m\n".encode(),
            )
        self._running = [n for n in names if n not in self.failing and n in ("CUDAExecutionProvider",)]
        super().__init__(path, sess_options=sess_options, providers=["CPUExecutionProvider"])

    def get_providers(self) -> list[str]:
        return [*self._running, "CPUExecutionProvider"]


def install_gpu_build(
    monkeypatch: Any,
    missing: tuple[str, ...] = (),
    failing: dict[str, str] | None = None,
    driver: bool = True,
    version: tuple[str, str] = ("1.31.1", "13.0"),
) -> None:
    """onnxruntime-gpu `version` (1.31.1 for CUDA 13 unless told) with `missing` libraries not found by preload_dlls
    (which a version before 1.21 has not got), `failing` providers, and the NVIDIA driver's library present or not."""
    from edge_inference.backends import cuda_libraries

    monkeypatch.setattr(cuda_libraries, "_loads", lambda library: driver)
    monkeypatch.setattr(ort, "cuda_version", version[1], raising=False)
    monkeypatch.setattr(ort, "__version__", version[0])
    if tuple(int(n) for n in version[0].split(".")[:2]) >= (1, 21):
        monkeypatch.setattr(ort, "preload_dlls", _preload_printing_failures(missing), raising=False)
    else:
        monkeypatch.delattr(ort, "preload_dlls", raising=False)
    monkeypatch.setattr(ort, "get_available_providers", lambda: list(GPU_PROVIDERS))
    monkeypatch.setattr(SessionDroppingProviders, "failing", dict(failing or {}))
    monkeypatch.setattr(ort, "InferenceSession", SessionDroppingProviders)
