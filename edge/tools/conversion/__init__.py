"""`edge models convert`: a float model made int8 for this device with the vendor's own tool, calibrated on the
user's own camera and judged against the float model. `convert.py` drives it; `quantize.py` (ONNX Runtime, NNCF) runs
here, `toolchain_convert.py` hands rknn and tflite-int8 to toolchains in environments of their own (`toolchains.py`),
where `rknn_build.py` and `tflite_build.py` run (they import only numpy and the toolkit, never this package).

May import what edge/tools may: edge.detection, edge.stream and the shared modules.
"""
