"""Backend names as users bring them from other tools (Frigate's detector types, Ultralytics' export formats, the
vendors' product names): any case is the engine's key, and a name of another program's is answered with ours."""

from __future__ import annotations

from collections.abc import Iterable

from edge_inference.backends.base import BackendError

_EDGETPU = "a Coral is backend edgetpu"
_TFLITE = "LiteRT (TFLite) is backend tflite"
_HAILO = "a Hailo-8 or 8L is backend hailo"
_RKNN = "a Rockchip NPU is backend rknn"
_EXPORT = "export the model to ONNX (Ultralytics: yolo export model=yolov8n.pt format=onnx) and use backend onnx"

# what another program calls an engine or device -> how it is written here
OTHER_NAMES = {
    **dict.fromkeys(("coral", "tpu", "edge_tpu", "edge-tpu", "pycoral"), _EDGETPU),
    **dict.fromkeys(
        ("myriad", "ncs2", "movidius"),
        "MYRIAD (Neural Compute Stick 2) is an OpenVINO device: backend openvino, device MYRIAD, which OpenVINO "
        "dropped after 2022.3 LTS",
    ),
    **dict.fromkeys(("tensorrt", "trt"), "TensorRT is a device of ONNX Runtime: backend onnx, device tensorrt"),
    "cuda": "CUDA is a device of ONNX Runtime: backend onnx, device cuda",
    "gpu": "a GPU is backend onnx, device cuda (NVIDIA), or backend openvino, device GPU (Intel)",
    "npu": "an NPU is backend openvino, device NPU (Intel Core Ultra), backend rknn (Rockchip) or backend hailo",
    "cpu": "onnx, tflite and openvino all run on the CPU; auto measures which is fastest here",
    **dict.fromkeys(("hailo8", "hailo8l", "hailo-8", "hailo-8l", "hailort", "hailo_platform"), _HAILO),
    **dict.fromkeys(("rockchip", "rknpu", "rknn2", "rknnlite", "rknn-lite", "rknn_lite"), _RKNN),
    **dict.fromkeys(
        ("litert", "ai-edge-litert", "tensorflow-lite", "tensorflowlite", "tf-lite", "tflite-runtime"), _TFLITE
    ),
    **dict.fromkeys(("onnxruntime", "onnx-runtime", "ort"), "ONNX Runtime is backend onnx"),
    **dict.fromkeys(("ov", "intel"), "OpenVINO is backend openvino"),
    **dict.fromkeys(("pytorch", "torch", "pt", "ultralytics", "ncnn", "tensorflow", "darknet", "coreml"), _EXPORT),
}


def backend_named(name: str, keys: Iterable[str]) -> str:
    """The engine key `name` means (`ONNX`, ` openvino` -> `onnx`, `openvino`); a name it is not: what to write."""
    known = list(keys)
    key = name.strip().lower()
    if key in known:
        return key
    other = OTHER_NAMES.get(key)
    hint = f" ({other})" if other else ""
    raise BackendError(f"unknown backend {name!r}{hint}; choose one of: {', '.join(known)}")
