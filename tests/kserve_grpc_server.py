"""The gRPC side of tests/kserve_server.py: an Open Inference Protocol server of our own over gRPC (the protocol's
`inference.GRPCInferenceService`, from the service definition tritonclient ships), with only its required methods
(every other answers UNIMPLEMENTED, as grpcio's base servicer does), running the same real model, and told to
misbehave: far too large an answer, none at all, a wrong shape or type, an output missing, NaN, Inf, an error."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as rpc

from tests.kserve_server import NUMPY, KServeModel

OVERSIZE_BYTES = 40_000_000  # 30 times what the declared outputs take: enough to be refused, cheap to build


class Servicer(rpc.GRPCInferenceServiceServicer):
    def __init__(self, model: KServeModel) -> None:
        self.model = model

    def ServerLive(self, request: Any, context: Any) -> Any:  # the service's own names, as grpcio calls them
        return pb.ServerLiveResponse(live=True)

    def ServerReady(self, request: Any, context: Any) -> Any:
        return pb.ServerReadyResponse(ready=True)

    def ModelReady(self, request: Any, context: Any) -> Any:
        return pb.ModelReadyResponse(ready=request.name == self.model.name)

    def ServerMetadata(self, request: Any, context: Any) -> Any:
        return pb.ServerMetadataResponse(name="ours", version="1", extensions=[])

    def ModelMetadata(self, request: Any, context: Any) -> Any:
        found = self.model.metadata()

        def tensors(entries: list[dict]) -> list[Any]:
            return [pb.ModelMetadataResponse.TensorMetadata(**entry) for entry in entries]

        return pb.ModelMetadataResponse(
            name=found["name"], versions=["1"], platform="onnxruntime",
            inputs=tensors(found["inputs"]), outputs=tensors(found["outputs"]),
        )  # fmt: skip

    def ModelInfer(self, request: Any, context: Any) -> Any:
        feeds = {}
        for entry, raw in zip(request.inputs, request.raw_input_contents, strict=True):
            feeds[entry.name] = np.frombuffer(raw, NUMPY[entry.datatype]).reshape(list(entry.shape))
        how = self.model.misbehave
        if how == "never":
            self.model.released.wait(120)
        if how == "error":
            context.abort(grpc.StatusCode.INTERNAL, "the model crashed on the GPU")
        answer = pb.ModelInferResponse(model_name=self.model.name, model_version="1")
        session = self.model.session
        for arg, value in zip(session.get_outputs(), session.run(None, feeds), strict=True):
            if how == "missing":
                continue
            if how == "wrong-shape":
                value = value.reshape(-1)[: value.size // 2]
            if how in ("nan", "inf"):
                value = value.copy()
                value.reshape(-1)[::7] = np.nan if how == "nan" else np.inf
            datatype, raw = "FP32", value.astype(np.float32).tobytes()
            if how == "oversize":
                raw = bytes(OVERSIZE_BYTES)
            if how == "bytes":  # BYTES: each element a 4-byte length and its characters
                datatype, value = "BYTES", value.reshape(-1)[:4]
                raw = b"".join(len(t).to_bytes(4, "little") + t for t in (b"0.5",) * value.size)
            answer.outputs.add(name=arg.name, datatype=datatype, shape=list(value.shape))
            answer.raw_output_contents.append(raw)
        return answer


@contextmanager
def kserve_grpc_server(model: KServeModel) -> Iterator[str]:
    """The model's triton+grpc:// reference; `model.misbehave` is the test's to set."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
    )
    rpc.add_GRPCInferenceServiceServicer_to_server(Servicer(model), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"triton+grpc://127.0.0.1:{port}/{model.name}"
    finally:
        model.released.set()
        server.stop(grace=None)


def model_for(name: str, path: Path) -> KServeModel:
    model = KServeModel(name, path)
    model.released = threading.Event()
    return model
