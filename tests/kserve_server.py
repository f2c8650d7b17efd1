"""An Open Inference Protocol (KServe v2) server of our own, with only the protocol's required HTTP endpoints (no
Triton extension: no model config, no statistics, no shared memory), running a real model on ONNX Runtime; and
told to misbehave: a wrong shape, BYTES instead of FP32, an output missing, NaN or Inf in the answer.

It reads requests as the protocol's JSON or with the binary tensor extension (tritonclient sends that), and always
answers in JSON, as a server without the extension does. Started on a free loopback port, in a thread of the test.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

V2_TYPES = {"tensor(float)": "FP32", "tensor(uint8)": "UINT8", "tensor(int64)": "INT64"}
NUMPY = {"FP32": np.float32, "UINT8": np.uint8, "INT64": np.int64}
# what an answer holds: wrong in content ...
MISBEHAVIOURS = ("none", "wrong-shape", "bytes", "missing", "nan", "inf")
# ... or in how it is sent (do_POST): a byte at a time, far too much (with a length, or chunked without), broken off
# by a reset, a redirect, a server error, never at all; and model metadata sent a byte at a time (at load)
TRANSPORT = ("trickle", "flood", "flood-chunked", "reset", "redirect", "error", "never", "trickle-metadata")
FLOOD_BYTES = 845_000_000


class KServeModel:
    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.misbehave = "none"
        self.released = threading.Event()  # ends what `never` and `trickle` hold: the test is over
        self.statistics_asked = threading.Event()
        self.statistics_held = threading.Event()  # set: Triton's statistics are answered (404: not the protocol's)
        self.statistics_held.set()

    def tensors(self, args: list[Any]) -> list[dict[str, Any]]:
        return [{"name": a.name, "datatype": V2_TYPES[a.type], "shape": list(a.shape)} for a in args]

    def metadata(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "versions": ["1"],
            "platform": "onnxruntime",
            "inputs": self.tensors(self.session.get_inputs()),
            "outputs": self.tensors(self.session.get_outputs()),
        }

    def infer(self, inputs: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        results = self.session.run(None, inputs)
        answered = []
        for arg, value in zip(self.session.get_outputs(), results, strict=True):
            datatype = V2_TYPES[arg.type]
            if self.misbehave == "missing":
                continue
            if self.misbehave == "wrong-shape":
                value = value.reshape(-1)[: value.size // 2]
            if self.misbehave in ("nan", "inf"):
                value = value.copy()
                value.reshape(-1)[::7] = np.nan if self.misbehave == "nan" else np.inf
            data: list[Any] = value.reshape(-1).tolist()
            if self.misbehave == "bytes":
                datatype, data = "BYTES", [str(v) for v in data[:4]]
                value = value.reshape(-1)[:4]
            # JSON has no NaN or Inf; Python writes them as the tokens servers send (NaN, Infinity)
            answered.append({"name": arg.name, "datatype": datatype, "shape": list(value.shape), "data": data})
        return answered


def _read_request(handler: BaseHTTPRequestHandler) -> dict[str, np.ndarray]:
    body = handler.rfile.read(int(handler.headers["Content-Length"]))
    header_length = handler.headers.get("Inference-Header-Content-Length")
    json_part = body[: int(header_length)] if header_length else body
    request, binary, offset = json.loads(json_part), body[len(json_part) :], 0
    inputs = {}
    for entry in request["inputs"]:
        dtype = NUMPY[entry["datatype"]]
        size = (entry.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            array = np.frombuffer(binary[offset : offset + size], dtype)
            offset += size
        else:
            array = np.asarray(entry["data"], dtype)
        inputs[entry["name"]] = array.reshape(entry["shape"])
    return inputs


def handler_for(model: KServeModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            base = f"/v2/models/{model.name}"
            if self.path in ("/v2/health/ready", "/v2/health/live", f"{base}/ready"):
                self._answer(200, {"ready": True} if "ready" in self.path else {"live": True})
            elif self.path == base and model.misbehave == "trickle-metadata":
                self._trickle(json.dumps(model.metadata()).encode())
            elif self.path == base:
                self._answer(200, model.metadata())
            elif self.path == f"{base}/stats":  # Triton's extension, asked for as if it were there: held on request
                model.statistics_asked.set()
                model.statistics_held.wait(120)
                self._answer(404, {"error": "no statistics"})
            else:  # Triton's extensions (config, statistics) are not the protocol's
                self._answer(404, {"error": f"not found: {self.path}"})

        def do_POST(self) -> None:
            if self.path != f"/v2/models/{model.name}/infer":
                self._answer(404, {"error": f"not found: {self.path}"})
                return
            inputs = _read_request(self)
            if model.misbehave in TRANSPORT:
                self._misbehave(lambda: json.dumps({"model_name": model.name, "outputs": model.infer(inputs)}).encode())
                return
            outputs = model.infer(inputs)
            self._answer(200, {"model_name": model.name, "model_version": "1", "outputs": outputs})

        def _misbehave(self, answer: Callable[[], bytes]) -> None:
            """`answer` is made only where a misbehaviour sends (part of) it."""
            how = model.misbehave
            if how == "never":
                model.released.wait(120)
            elif how == "trickle":
                self._trickle(answer())
            elif how == "flood":
                self._flood({"Content-Length": str(FLOOD_BYTES)}, lambda block: block)
            elif how == "flood-chunked":
                self._flood({"Transfer-Encoding": "chunked"}, lambda block: b"%x\r\n%s\r\n" % (len(block), block))
            elif how == "reset":
                whole = answer()
                self._head(200, {"Content-Length": str(len(whole))})
                self.wfile.write(whole[: len(whole) // 2])
                self.wfile.flush()
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()  # with no linger: a reset, not an end
            elif how == "redirect":
                self._head(307, {"Location": "http://127.0.0.1:9/elsewhere", "Content-Length": "0"})
            elif how == "error":
                self._answer(500, {"error": "the model crashed on the GPU"})
            self.close_connection = True

        def _head(self, status: int, headers: dict[str, str]) -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()

        def _trickle(self, answer: bytes) -> None:
            """The answer a byte every half second, until it is whole or the client hangs up."""
            self._head(200, {"Content-Type": "application/json", "Content-Length": str(len(answer))})
            try:
                for byte in answer:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    if model.released.wait(0.5):
                        return
            except OSError:
                return

        def _flood(self, headers: dict[str, str], framed: Callable[[bytes], bytes]) -> None:
            """FLOOD_BYTES of answer, 1 MiB at a time, until the client hangs up."""
            self._head(200, {"Content-Type": "application/json", **headers})
            block = b"0" * (1 << 20)
            try:
                for _ in range(FLOOD_BYTES // len(block)):
                    self.wfile.write(framed(block))
            except OSError:
                return

    return Handler


@contextmanager
def kserve_server(name: str, path: Path) -> Iterator[tuple[str, KServeModel]]:
    """(the model's triton:// reference, the model, whose `misbehave` the test sets)."""
    model = KServeModel(name, path)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(model))
    server.daemon_threads = True  # a request still held (never, trickle) does not hold the shutdown
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"triton://127.0.0.1:{server.server_address[1]}/{name}", model
    finally:
        model.released.set()
        server.shutdown()
        server.server_close()
