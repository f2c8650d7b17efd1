"""tflite_runtime 2.17.1's interpreter module, as far as the Edge TPU engine uses it.

`load_delegate` and `Delegate` copy v2.17.1's (tensorflow/lite/python/interpreter.py): the library is loaded with
ctypes, `tflite_plugin_create_delegate(keys, values, n, report)` is called with the options, and a NULL answer is
`ValueError("Failed to load delegate from <library>\\n<what it reported>")`. The delegate library is a real one
(the tests build a small C stand-in that answers as libedgetpu does: a delegate where its device is present, NULL
where not). `Interpreter`, given a delegate, computes what the Edge TPU computes for a compiled model, the same int8
graph, by running the uncompiled twin (`x_edgetpu.tflite` -> `x.tflite`) on LiteRT; without one, a compiled model's
custom op is unresolved, as in the real runtime.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from ai_edge_litert.interpreter import Interpreter as _LiteRT

EDGETPU_OP = b"edgetpu-custom-op"


class Delegate:
    def __init__(self, library, options=None):
        self._library = ctypes.PyDLL(str(library))
        self._library.tflite_plugin_create_delegate.argtypes = [
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.c_int,
            ctypes.CFUNCTYPE(None, ctypes.c_char_p),
        ]
        self._library.tflite_plugin_create_delegate.restype = ctypes.c_void_p
        options = options or {}
        keys = (ctypes.c_char_p * len(options))(*[str(k).encode() for k in options])
        values = (ctypes.c_char_p * len(options))(*[str(v).encode() for v in options.values()])
        reported = []
        report = ctypes.CFUNCTYPE(None, ctypes.c_char_p)(lambda message: reported.append(message.decode()))
        self._delegate_ptr = self._library.tflite_plugin_create_delegate(keys, values, len(options), report)
        if self._delegate_ptr is None:
            raise ValueError("\n".join(reported))

    def __del__(self):
        if getattr(self, "_delegate_ptr", None) is not None:
            self._library.tflite_plugin_destroy_delegate.argtypes = [ctypes.c_void_p]
            self._library.tflite_plugin_destroy_delegate(self._delegate_ptr)
            self._delegate_ptr = None


def load_delegate(library, options=None):
    try:
        delegate = Delegate(library, options)
    except ValueError as e:
        raise ValueError(f"Failed to load delegate from {library}\n{e}") from None
    return delegate


class Interpreter:
    def __init__(self, model_path=None, experimental_delegates=None, num_threads=None):
        path = Path(model_path)
        compiled = EDGETPU_OP in path.read_bytes()
        self._on_tpu = compiled and bool(experimental_delegates)
        twin = path.with_name(path.name.replace("_edgetpu", "")) if self._on_tpu else path
        self._inner = _LiteRT(model_path=str(twin), num_threads=num_threads)
        self._compiled = compiled
        self._delegate = experimental_delegates[0] if self._on_tpu else None

    def allocate_tensors(self) -> None:
        if self._compiled and not self._on_tpu:
            raise RuntimeError(
                "Encountered unresolved custom op: edgetpu-custom-op.\nSee instructions: "
                "https://www.tensorflow.org/lite/guide/ops_custom \n"
                "Node number 0 (edgetpu-custom-op) failed to prepare."
            )
        self._inner.allocate_tensors()

    def invoke(self) -> None:
        """The delegate's transfer to the device, then the computation (the library stand-in aborts the process when
        the device is gone, as libedgetpu does)."""
        library = getattr(self._delegate, "_library", None)
        if library is not None and hasattr(library, "stand_in_bulk_out"):
            size = sum(int(d["shape"].prod()) for d in self._inner.get_input_details())
            library.stand_in_bulk_out(ctypes.c_uint(size))
        self._inner.invoke()

    def __getattr__(self, name):
        return getattr(self._inner, name)
