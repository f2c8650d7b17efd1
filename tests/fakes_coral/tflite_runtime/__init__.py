"""A stand-in for tflite_runtime 2.17.1 (feranick's wheel, paired with libedgetpu 16.0tf2.17.1) for the Edge TPU
engine's tests: `interpreter.py` copies its `load_delegate` and `Delegate` (tensorflow/lite/python/interpreter.py at
v2.17.1) and stands in for the TPU by running the model's uncompiled twin on LiteRT."""

__version__ = "2.17.1"
