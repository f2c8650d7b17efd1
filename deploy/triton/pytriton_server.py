"""A real Triton Inference Server on the CPU, without a GPU box or Docker: NVIDIA's PyTriton (`nvidia-pytriton` on
PyPI bundles `tritonserver`, x86-64 Linux) serving each model of a repository that `edge models export-triton`
wrote, run by ONNX Runtime in PyTriton's Python backend. The wire, the metadata, the dynamic batcher, shared memory
and the statistics are Triton's own; only the backend differs from `tritonserver --model-repository DIR`.

Runs in an environment of its own (`tests/triton.py` makes one): PyTriton's stub needs a system Python
(Debian's /usr/bin/python3.11; pyenv's fails with "'_thread.RLock' object has no attribute '_recursion_count'"),
and it pins numpy below 2.

    python pytriton_server.py --repository DIR --http-port 8000 --grpc-port 8001 --metrics-port 8002
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnxruntime as ort
from google.protobuf import text_format
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig
from tritonclient.grpc import model_config_pb2 as pb

DTYPES = {
    pb.TYPE_FP32: np.float32,
    pb.TYPE_FP16: np.float16,
    pb.TYPE_UINT8: np.uint8,
    pb.TYPE_INT8: np.int8,
    pb.TYPE_INT32: np.int32,
    pb.TYPE_INT64: np.int64,
}


def session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def bind(triton: Triton, folder: Path, threads: int) -> None:
    config = text_format.Parse((folder / "config.pbtxt").read_text(), pb.ModelConfig())
    model = session(folder / "1" / "model.onnx", threads)
    names = [o.name for o in config.output]

    def infer(**inputs: np.ndarray) -> dict[str, np.ndarray]:  # a batch, stacked by PyTriton's @batch
        return dict(zip(names, model.run(names, inputs), strict=True))

    def infer_each(requests: list) -> list[dict[str, np.ndarray]]:  # unbatched: each request as it came
        return [infer(**{name: request[name] for name in request}) for request in requests]

    batching = config.max_batch_size > 0
    tensors = [
        [Tensor(name=t.name, dtype=DTYPES[t.data_type], shape=tuple(t.dims)) for t in ports]
        for ports in (config.input, config.output)
    ]
    delay = config.dynamic_batching.max_queue_delay_microseconds
    triton.bind(
        model_name=config.name or folder.name,
        infer_func=batch(infer) if batching else infer_each,
        inputs=tensors[0],
        outputs=tensors[1],
        config=ModelConfig(
            batching=batching,
            max_batch_size=config.max_batch_size or 4,
            batcher=DynamicBatcher(max_queue_delay_microseconds=delay),
        ),
        strict=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repository", type=Path, required=True)
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads per model")
    parser.add_argument(
        "--access-token",
        help="restrict shared memory, statistics and the repository API to clients sending this token (Triton's "
        "--http-restricted-api; PyTriton's default, with a random token). Without: open, as tritonserver's default",
    )
    parser.add_argument("--grpc-cert", type=Path, help="gRPC over TLS: the server's certificate (PEM)")
    parser.add_argument("--grpc-key", type=Path, help="and its key")
    args = parser.parse_args()
    tls = {"grpc_use_ssl": True, "grpc_server_cert": args.grpc_cert, "grpc_server_key": args.grpc_key}
    config = TritonConfig(
        http_address=args.address,
        http_port=args.http_port,
        grpc_address=args.address,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        **(tls if args.grpc_cert else {}),
    )
    security = (
        TritonSecurityConfig(access_token=args.access_token)
        if args.access_token
        else TritonSecurityConfig(restricted_endpoints=[])
    )
    with Triton(config=config, security_config=security) as triton:
        for folder in sorted(p for p in args.repository.iterdir() if (p / "config.pbtxt").is_file()):
            bind(triton, folder, args.threads)
        triton.serve()


if __name__ == "__main__":
    main()
