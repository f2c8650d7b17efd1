"""A Triton model repository for an ONNX detector: `NAME/config.pbtxt` and `NAME/1/model.onnx`, ready for
`tritonserver --model-repository DIR` (or NVIDIA's container) with its ONNX Runtime backend.

The config is built as Triton's own `ModelConfig` message (tritonclient's `model_config_pb2`, the server's schema)
and written in its text format, so a field this writes is one the server reads. Dynamic batching needs a batch
dimension the model can vary: most exports fix it at 1 (a YOLOX or YOLOv8 export reshapes its head to `[1, 85,
-1]`). Where the only fixed 1s are those reshapes' first entries, they become 0 ("copy the input's batch") and the
batch dimension dynamic; ONNX Runtime then runs a batch of two and must give each frame the outputs it gives
that frame alone, or the file is written as it was, unbatched (`max_batch_size: 0`), and the note says so.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edge_inference.models.errors import ModelError

NEEDS = "pip install 'edge-inference[triton]' (onnx and tritonclient write the repository)"
DATA_TYPES = {
    "float32": "TYPE_FP32",
    "float16": "TYPE_FP16",
    "uint8": "TYPE_UINT8",
    "int8": "TYPE_INT8",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
}


@dataclass(frozen=True)
class ExportOptions:
    max_batch_size: int = 8
    queue_delay_us: int = 2000  # how long the batcher waits for more requests to join a batch
    instances: int = 1
    kind: str = "KIND_GPU"  # KIND_GPU, KIND_CPU


@dataclass
class Exported:
    folder: Path
    config: str  # config.pbtxt's text
    batching: bool
    notes: list[str] = field(default_factory=list)


def _imports() -> tuple[Any, Any, Any]:
    try:
        import onnx
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2
    except ImportError:
        raise ModelError(f"edge models export-triton needs onnx and tritonclient: {NEEDS}") from None
    return onnx, text_format, model_config_pb2


def _reshape_targets(model: Any) -> list[tuple[Any, np.ndarray]]:
    """The constant shapes of the graph's Reshapes that fix a batch of 1, as (tensor proto, value)."""
    from onnx import numpy_helper

    constants = {t.name: t for t in model.graph.initializer}
    constants.update(
        {n.output[0]: n.attribute[0].t for n in model.graph.node if n.op_type == "Constant" and n.attribute}
    )
    found = []
    for node in model.graph.node:
        tensor = constants.get(node.input[1]) if node.op_type == "Reshape" and len(node.input) > 1 else None
        if tensor is not None:
            value = numpy_helper.to_array(tensor)
            if value.ndim == 1 and value.size > 1 and value[0] == 1:
                found.append((tensor, value))
    return found


def batchable(model: Any) -> Any | None:
    """A copy of the model with a dynamic batch dimension, or None where its batch is not only fixed at the input,
    the outputs and reshapes (checked by running it, `_same_per_frame`)."""
    from onnx import numpy_helper

    copy = type(model)()
    copy.CopyFrom(model)
    for tensor, value in _reshape_targets(copy):
        changed = value.copy()
        changed[0] = 0  # Reshape's 0: the input's own dimension
        tensor.CopyFrom(numpy_helper.from_array(changed, tensor.name))
    for port in [*copy.graph.input, *copy.graph.output]:
        dims = port.type.tensor_type.shape.dim
        if not dims or (dims[0].HasField("dim_value") and dims[0].dim_value != 1):
            return None
        dims[0].dim_param = "batch"
    del copy.graph.value_info[:]  # shapes inferred for a batch of 1
    return copy


def _same_per_frame(original: bytes, changed: bytes) -> bool:
    """ONNX Runtime runs the changed model on a batch of two frames: each must get the original's outputs."""
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    quiet = ort.SessionOptions()
    quiet.log_severity_level = 4  # a model that cannot batch fails here by design: its kernel's error is no news
    try:
        one = ort.InferenceSession(original, quiet, providers=["CPUExecutionProvider"])
        two = ort.InferenceSession(changed, quiet, providers=["CPUExecutionProvider"])
        port = one.get_inputs()[0]
        shape = [1, *[d if isinstance(d, int) else 1 for d in port.shape[1:]]]
        rng = np.random.default_rng(0)
        dtype = np.float32 if "float" in port.type else np.uint8
        frames = [(rng.random(shape) * (1 if dtype == np.float32 else 255)).astype(dtype) for _ in range(2)]
        together = two.run(None, {port.name: np.concatenate(frames)})
        for i, frame in enumerate(frames):
            alone = one.run(None, {port.name: frame})
            if not all(np.allclose(a[0], t[i], atol=1e-4) for a, t in zip(alone, together, strict=True)):
                return False
    except Exception:  # noqa: BLE001 - a model ONNX Runtime cannot run batched stays unbatched
        return False
    return True


def _ports(onnx: Any, ports: Any, batched: bool) -> list[tuple[str, str, list[int]]]:
    """(name, Triton data type, dims without the batch where batched) of a graph's inputs or outputs."""
    found = []
    for port in ports:
        tensor = port.type.tensor_type
        dtype = str(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        if dtype not in DATA_TYPES:
            raise ModelError(f"tensor {port.name} is {dtype}, which this export does not write")
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
        found.append((port.name, DATA_TYPES[dtype], dims[1:] if batched else dims))
    return found


def _weights_are_not_inputs(model: Any) -> None:
    """Older exporters (NanoDet's) list every weight among the graph's inputs too (ONNX IR < 4): ONNX Runtime reads
    them as overridable constants, Triton as inputs a client must send. Taken out, as ONNX Runtime's
    remove_initializer_from_input.py does."""
    weights = {t.name for t in model.graph.initializer}
    kept = [port for port in model.graph.input if port.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(kept)


def export_repository(source: Path, folder: Path, name: str, options: ExportOptions) -> Exported:
    """Write `folder/name/` for `source` (an ONNX model): the model as version 1 and its config."""
    onnx, text_format, pb = _imports()
    if source.suffix.lower() != ".onnx":
        raise ModelError(
            f"{source.name} is not an ONNX model: Triton's repository here takes ONNX (its ONNX Runtime backend); "
            "give the model's .onnx (`edge models list` shows the registry's)"
        )
    model = onnx.load(str(source))
    _weights_are_not_inputs(model)
    notes: list[str] = []
    changed = batchable(model) if options.max_batch_size > 0 else None
    if changed is not None and _same_per_frame(model.SerializeToString(), changed.SerializeToString()):
        model, batching = changed, True
    else:
        batching = False
        if options.max_batch_size > 0:
            notes.append(
                "the model's batch is fixed (not only at its input, outputs and reshapes), so Triton runs it one "
                "frame at a time (max_batch_size 0, no dynamic batching): export it with a dynamic batch to batch"
            )
    config = pb.ModelConfig(name=name, backend="onnxruntime", max_batch_size=options.max_batch_size if batching else 0)
    for port_name, dtype, dims in _ports(onnx, model.graph.input, batching):
        config.input.add(name=port_name, data_type=getattr(pb, dtype), dims=dims)
    for port_name, dtype, dims in _ports(onnx, model.graph.output, batching):
        config.output.add(name=port_name, data_type=getattr(pb, dtype), dims=dims)
    if batching:
        config.dynamic_batching.max_queue_delay_microseconds = options.queue_delay_us
    group = config.instance_group.add(count=options.instances)
    group.kind = getattr(pb.ModelInstanceGroup, options.kind)
    for prop in model.metadata_props:  # an exporter's own keys (Ultralytics: names, imgsz): read by the edge side
        config.parameters[prop.key].string_value = prop.value
    text = text_format.MessageToString(config)
    target = folder / name
    if target.exists():
        shutil.rmtree(target)
    (target / "1").mkdir(parents=True)
    onnx.save(model, str(target / "1" / "model.onnx"))
    (target / "config.pbtxt").write_text(text, encoding="utf-8")
    return Exported(target, text, batching, notes)
