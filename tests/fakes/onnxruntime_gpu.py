"""ONNX Runtime as a GPU build (onnxruntime-gpu with TensorRT, as on a Jetson) would take a session's providers.

`install(monkeypatch)` makes the installed onnxruntime report the TensorRT, CUDA and CPU providers and records what a
session asks for, normalised by ONNX Runtime's own Python layer (`check_and_normalize_provider_args`, which turns
every option value into a string, as the C++ providers receive them). `get_providers` answers what was asked for, as
a GPU build does when every provider starts; the inference itself runs on the CPU provider of the installed runtime.
"""

from __future__ import annotations

from typing import Any

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
