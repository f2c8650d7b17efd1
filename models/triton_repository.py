"""A Triton model repository for an ONNX detector: `NAME/config.pbtxt` and `NAME/1/model.onnx`, ready for
`tritonserver --model-repository DIR` (or NVIDIA's container) with its ONNX Runtime backend.

The config is built as Triton's own `ModelConfig` message (tritonclient's `model_config_pb2`, the server's schema)
and written in its text format, so a field this writes is one the server reads. Dynamic batching needs a batch
dimension the model can vary: most exports fix it at 1 (a YOLOX or YOLOv8 export reshapes its head to `[1, 85,
-1]`). Where the only fixed 1s are those reshapes' first entries, they become 0 ("copy the input's batch") and the
batch dimension dynamic; ONNX Runtime then runs a batch of two and must give each frame the outputs it gives
that frame alone, or the file is written as it was, unbatched (`max_batch_size: 0`), and the note says so.

By default the model takes pixels (`pixels_input`): uint8 `[batch, H, W, 3]` in the model's own colour order, the
letterboxed frame as the edge has it, and the cast, the layout and the normalisation run in the graph, on the
server's GPU. A float32 image tensor is four times the bytes: at 416x416 2 MB a frame against 0.5, for every camera
on the site's network, and the edge copied and serialised all of it (OpenVINO's PrePostProcessor does the same for
a GPU or NPU on this machine). The edge reads the server's input as it reads any model's: a uint8 image input takes
the letterboxed pixels as they are (`models/preprocess.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edge_inference.extras import install_extra
from edge_inference.models.errors import ModelError
from edge_inference.models.overrides import SpecOverrides, load_sidecar, sidecar_path
from edge_inference.models.resolve import ModelIO, resolve_spec
from edge_inference.models.spec import Preprocessing

NEEDS = f"{install_extra('triton')} (onnx and tritonclient write the repository)"
DATA_TYPES = {
    "float32": "TYPE_FP32",
    "float16": "TYPE_FP16",
    "uint8": "TYPE_UINT8",
    "int8": "TYPE_INT8",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
}


# A model's name on the server is its folder in the repository and the NAME of every `/v2/models/NAME` URL: letters,
# digits and `_.-`, from a letter, digit or underscore; never `..` (a name is never a path).
MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
OWN_FILES = ("config.pbtxt", "1/model.onnx")  # what an export writes in its model's folder, and all it may replace


def check_model_name(name: str) -> str:
    if not MODEL_NAME.fullmatch(name) or ".." in name:
        raise ModelError(
            f"{name!r} cannot be a model's name on a Triton server: use letters, digits and _.- from a letter, digit "
            "or _, at most 128, no '..' (for example --name yolox_nano)"
        )
    return name


def default_model_name(stem: str) -> str:
    """A file's stem as a name the server takes: `yolox nano.v2` -> `yolox_nano_v2`."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", stem)[:128] or "model"


def _make_room(target: Path, force: bool) -> None:
    """The model's folder ready for its files; an existing one only with `force`, and then only the files an export
    writes go (a user's own notes, other versions, stay)."""
    for path in (target, target / "1", *(target / own for own in OWN_FILES)):
        if path.is_symlink():
            raise ModelError(
                f"{path} is a symbolic link: the export writes its model's folder and files itself; remove the link "
                "or give another --name"
            )
    if target.exists() and not force:
        raise ModelError(
            f"{target} exists: --force replaces the model's own files there ({', '.join(OWN_FILES)}) and nothing "
            "else, or give another --name"
        )
    if target.exists() and not target.is_dir():
        raise ModelError(f"{target} is a file, not a model's folder: move it or give another --name")
    for own in OWN_FILES:
        (target / own).unlink(missing_ok=True)
    (target / "1").mkdir(parents=True, exist_ok=True)


def _refuse_early(target: Path, force: bool) -> None:
    """What `_make_room` would refuse, said before the model is read: a link there, or a folder without --force."""
    if target.is_symlink() or (target.exists() and not force):
        _make_room(target, force)


def _load(onnx: Any, source: Path) -> Any:
    try:
        return onnx.load(str(source))
    except onnx.checker.ValidationError as exc:  # external data that points outside the model's folder, say
        raise ModelError(f"{source.name} cannot be read as ONNX: {str(exc).splitlines()[0]}") from None


@dataclass(frozen=True)
class ExportOptions:
    max_batch_size: int = 8
    queue_delay_us: int = 2000  # how long the batcher waits for more requests to join a batch
    instances: int = 1
    kind: str = "KIND_GPU"  # KIND_GPU, KIND_CPU
    pixels: bool = True  # the model takes uint8 pixels; False: its own input, as exported
    force: bool = False  # replace the model's own files where its folder exists already


@dataclass
class Exported:
    folder: Path
    config: str  # config.pbtxt's text
    batching: bool
    notes: list[str] = field(default_factory=list)
    takes: str = ""  # what a request carries: "uint8 pixels [H, W, 3]" or the model's own tensor


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


def pixels_input(model: Any, pre: Preprocessing) -> tuple[Any, str | None]:
    """The model fed uint8 pixels (`[batch, H, W, 3]`, its own colour order): a Cast, a Transpose where it reads
    NCHW, and its normalisation (`x / std - mean / std` per channel, as the edge's pre-processing computes it)
    prepended to the graph. (model, None), or (the model as it was, why not) for an input that is no float image."""
    from onnx import TensorProto, helper

    port = model.graph.input[0]
    tensor = port.type.tensor_type
    dims = list(tensor.shape.dim)
    if tensor.elem_type == TensorProto.UINT8:
        return model, None  # it takes pixels already (the SSD's raw uint8 input)
    planar = len(dims) == 4 and dims[1].HasField("dim_value") and dims[1].dim_value == 3
    if tensor.elem_type != TensorProto.FLOAT or len(dims) != 4 or (not planar and dims[3].dim_value != 3):
        return model, "its input is not a float image tensor, so it keeps it (the edge sends that tensor)"
    changed = type(model)()
    changed.CopyFrom(model)
    graph, name = changed.graph, port.name
    pixels = helper.make_tensor_value_info(f"{name}_pixels", TensorProto.UINT8, None)
    for dim in [dims[0], dims[2], dims[3], dims[1]] if planar else dims:
        pixels.type.tensor_type.shape.dim.add().CopyFrom(dim)
    steps = [helper.make_node("Cast", [pixels.name], [f"{name}_float"], to=TensorProto.FLOAT)]
    if planar:
        steps.append(helper.make_node("Transpose", [steps[-1].output[0]], [f"{name}_planar"], perm=[0, 3, 1, 2]))
    steps += _normalisation(graph, name, pre, steps[-1].output[0], planar)
    steps[-1].output[0] = name  # the original input, now made inside the graph
    for index, step in enumerate(steps):
        graph.node.insert(index, step)
    graph.input.remove(graph.input[0])
    graph.input.insert(0, pixels)
    return changed, None


def _normalisation(graph: Any, name: str, pre: Preprocessing, source: str, planar: bool) -> list[Any]:
    """Mul by 1/std and Add -mean/std per channel, each left out where it changes nothing; constants added."""
    from onnx import helper, numpy_helper

    std, mean = np.asarray(pre.std, np.float32), np.asarray(pre.mean, np.float32)
    per_channel = (1, 3, 1, 1) if planar else (1, 1, 1, 3)
    steps = []
    for op, value in (("Mul", 1.0 / std), ("Add", -mean / std)):
        if np.allclose(value, 1.0 if op == "Mul" else 0.0):
            continue
        constant = numpy_helper.from_array(value.reshape(per_channel).astype(np.float32), f"{name}_{op.lower()}")
        graph.initializer.append(constant)
        steps.append(helper.make_node(op, [source, constant.name], [f"{name}_{op.lower()}ed"]))
        source = steps[-1].output[0]
    return steps


def _same_as_the_tensor(original: bytes, changed: bytes, pre: Preprocessing) -> bool:
    """ONNX Runtime runs both on one frame of pixels: the pixel model's outputs must be the original's on the tensor
    the edge would have made of them."""
    import onnxruntime as ort

    one = ort.InferenceSession(original, providers=["CPUExecutionProvider"])
    two = ort.InferenceSession(changed, providers=["CPUExecutionProvider"])
    pixels_port, tensor_port = two.get_inputs()[0], one.get_inputs()[0]
    shape = [1, *[d if isinstance(d, int) else 1 for d in pixels_port.shape[1:]]]
    pixels = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    tensor = (pixels.astype(np.float32) - np.asarray(pre.mean, np.float32)) / np.asarray(pre.std, np.float32)
    if tensor_port.shape[1] == 3:
        tensor = tensor.transpose(0, 3, 1, 2)
    alone = one.run(None, {tensor_port.name: np.ascontiguousarray(tensor)})
    fed = two.run(None, {pixels_port.name: pixels})
    return all(np.allclose(a, b, atol=1e-3, rtol=1e-4) for a, b in zip(alone, fed, strict=True))


def model_preprocessing(model: Any, name: str, overrides: SpecOverrides) -> Preprocessing:
    """What the edge does to a frame for this model (`resolve_spec` on the file's own facts, its sidecar's on top):
    the normalisation the pixel front does instead."""

    def shape(port: Any) -> tuple[int, ...]:  # a batch dimension made dynamic is one frame's here, as on the edge
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in port.type.tensor_type.shape.dim]
        return tuple([1, *dims[1:]] if dims else dims)

    io = ModelIO(
        input_shape=shape(model.graph.input[0]),
        output_shapes=[shape(o) for o in model.graph.output],
        output_names=[o.name for o in model.graph.output],
        metadata={prop.key: prop.value for prop in model.metadata_props},
    )
    return resolve_spec(name, io, overrides).preprocessing


def _with_pixels(model: Any, source: Path, notes: list[str]) -> Any:
    """The model with its pixel front where that gives its own outputs (checked by running both), else as it was."""
    sidecar = sidecar_path(source)
    pre = model_preprocessing(model, source.stem, load_sidecar(sidecar) if sidecar else SpecOverrides())
    changed, why = pixels_input(model, pre)
    if changed is model and why is None:
        return model
    if why is None and not _same_as_the_tensor(model.SerializeToString(), changed.SerializeToString(), pre):
        why = "its pixel front did not give its own outputs, so it keeps its input (the edge sends that tensor)"
    if why is not None:
        notes.append(why)
        return model
    return changed


def export_repository(source: Path, folder: Path, name: str, options: ExportOptions) -> Exported:
    """Write `folder/name/` for `source` (an ONNX model): the model as version 1 and its config."""
    check_model_name(name)
    onnx, text_format, pb = _imports()
    if source.suffix.lower() != ".onnx":
        raise ModelError(
            f"{source.name} is not an ONNX model: Triton's repository here takes ONNX (its ONNX Runtime backend); "
            "give the model's .onnx (`edge models list` shows the registry's)"
        )
    _refuse_early(folder / name, options.force)
    model = _load(onnx, source)
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
    if options.pixels:
        model = _with_pixels(model, source, notes)
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
    first = config.input[0]
    kind = (
        "uint8 pixels" if first.data_type == pb.TYPE_UINT8 else pb.DataType.Name(first.data_type).removeprefix("TYPE_")
    )
    takes = f"takes {kind} {list(first.dims)}"
    target = folder / name
    _make_room(target, options.force)
    onnx.save(model, str(target / "1" / "model.onnx"))
    (target / "config.pbtxt").write_text(text, encoding="utf-8")
    return Exported(target, text, batching, notes, takes)
