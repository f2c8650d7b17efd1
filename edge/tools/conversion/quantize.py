"""int8 with the vendors' own tools: ONNX Runtime's static quantisation and NNCF's post-training quantisation for
OpenVINO, both calibrated on tensors made from the user's frames exactly as the pipeline makes them.

The detection head stays in float. Its last convolutions (YOLOX: class, box and objectness per scale) and what
follows them to the outputs (sigmoid, reshape, concat) carry scores and box offsets whose int8 steps cost agreement
at little gain: they are a small share of the compute. rknn_model_zoo and Ultralytics' int8 exports keep that part
in float for the same reason. It is found from the graph, not by name: every node on a path from an output back to,
and including, the first convolution met.

The stem stays in float too: every node from the input up to its fifth convolution (YOLOX: the Focus slices, its
convolution and the first downsampling block). There the input's full range meets the first weights, and a faint
object's signal is a few int8 steps wide. On the shared video, yolox-nano's int8 lost one object the float model
scores near the threshold in every frame (agreement 0.747 with the head alone in float); with the stem's first two
convolutions in float 0.922 (OpenVINO 0.865), with four 0.947 (OpenVINO 0.926), at the same CPU per frame as two
(`benchmarks/int8_layers.py`, BENCHMARKS.md). Keeping the whole head in float, or any calibration method, did not
bring it back.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edge_inference.backends.openvino_model import batch_of_one
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.tools.folders import work_prefix
from edge_inference.extras import install_extra

CONVERT_EXTRA = install_extra("convert")
QDQ_OPSET = 13  # per-channel QuantizeLinear/DequantizeLinear needs opset 13
# ONNX Runtime's calibration: percentile (99.999th) clips the rare extreme activations min-max would stretch every
# step for. yolox-nano on the shared video, 100 frames each: people's AP against the float model 0.987 with it, 0.895
# with minmax and with entropy (BENCHMARKS.md, issue 59)
DEFAULT_METHOD = "percentile"
# ONNX Runtime's calibrators keep every intermediate tensor of every frame they are given at once, then histogram
# them: a stock YOLOv8n at 640 took over 16 GB for 100 frames and was killed. Given in passes of this many frames,
# the histograms are merged pass by pass (quantize_static's `CalibStridedMinMax`, which every calibrator honours)
CALIBRATION_CHUNK = 8
FORMATS = {"qdq": "QDQ", "qoperator": "QOperator"}  # `operators` -> ONNX Runtime's QuantFormat member
STEM_CONVS = 4  # convolutions kept in float after the input, with what comes before and between them
OPENVINO_CONVOLUTIONS = ("Convolution", "GroupConvolution")  # ONNX's Conv is either (depthwise: grouped)
# ONNX's and ONNX Runtime's quantised operators: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearConv,
# QGemm... (and ConvInteger, MatMulInteger: "Integer" in the name)
QUANTISED_OPS = ("Quantize", "Dequantize", "DynamicQuantize", "QLinear", "QGemm")
OPENVINO_QUANTISED = ("FakeQuantize", "i8 Constant", "u8 Constant", "i4 Constant", "u4 Constant")  # an IR's


def _stem(ops: Iterable[tuple[str, str]], convolutions: tuple[str, ...], convs: int) -> list[str]:
    """Names of (name, type) ops in topological order up to, not including, convolution number `convs` + 1."""
    stem: list[str] = []
    seen = 0
    for name, kind in ops if convs else ():
        if kind in convolutions:
            if seen == convs:
                break
            seen += 1
        stem.append(name)
    return stem


def onnx_stem(model: Any, convs: int = STEM_CONVS) -> list[str]:
    """An ONNX graph's stem (its node list is in topological order)."""
    return _stem(((node.name, node.op_type) for node in model.graph.node), ("Conv",), convs)


def openvino_stem(model: Any, convs: int = STEM_CONVS) -> list[str]:
    """An OpenVINO model's stem, by friendly name (its ordered ops, without the constants and the input)."""
    ops = ((op.get_friendly_name(), op.get_type_name()) for op in model.get_ordered_ops())
    kept = ((name, kind) for name, kind in ops if kind not in ("Parameter", "Constant"))
    return _stem(kept, OPENVINO_CONVOLUTIONS, convs)


def onnx_head(model: Any, outputs: list[str] | None = None) -> list[str]:
    """Names of an ONNX graph's head nodes: from each output (or those named) back to the first Conv on each path,
    inclusive (DFL's fixed convolution walked through)."""
    producer = {out: node for node in model.graph.node for out in node.output}
    head: dict[str, None] = {}
    stack = list(outputs or [output.name for output in model.graph.output])
    while stack:
        node = producer.get(stack.pop())
        if node is None or node.name in head:
            continue
        head[node.name] = None
        if node.op_type != "Conv" or _is_dfl(producer.get(node.input[0])):
            stack.extend(node.input)
    return list(head)


def _is_dfl(feeding: Any) -> bool:
    """A convolution fed by a Softmax is YOLOv8/YOLO11's DFL: the expectation over each side's bins (fixed weights
    0..15), box arithmetic rather than a learned layer; the head goes on to the box branch's convolutions behind it.
    Stopping there left YOLOv8's box branches, coordinates and all, in int8."""
    return feeding is not None and feeding.op_type == "Softmax"


def float_subgraphs(model: Any, convs: int = STEM_CONVS) -> list[list[str]]:
    """The stem and the head as rknn-toolkit2's hybrid quantisation names what it keeps in float16: [first tensor,
    last tensor] pairs. The model's input to the stem's last tensor; for each output, every tensor the body hands
    to one of the head's convolutions, to that output."""
    nodes = {node.name: node for node in model.graph.node}
    stem = onnx_stem(model, convs)
    pairs = [[model.graph.input[0].name, nodes[stem[-1]].output[0]]] if stem else []
    made_by = {out: node.name for node in model.graph.node for out in node.output}
    for output in (output.name for output in model.graph.output):
        head = set(onnx_head(model, [output]))
        entries = {
            node.input[0]
            for name in head
            if (node := nodes[name]).op_type == "Conv" and made_by.get(node.input[0]) not in head
        }
        pairs += [[entry, output] for entry in sorted(entries)]
    return pairs


def openvino_head(model: Any) -> list[str]:
    """The same walk on an OpenVINO model: friendly names from each Result back to the first Convolution."""
    head: dict[str, None] = {}
    stack = [result.input_value(0).get_node() for result in model.get_results()]
    while stack:
        node = stack.pop()
        name = node.get_friendly_name()
        if name in head or node.get_type_name() in ("Parameter", "Constant"):
            continue
        head[name] = None
        feeding = node.input_value(0).get_node() if node.get_input_size() else None
        softmax = feeding is not None and feeding.get_type_name() in ("Softmax", "SoftMax")
        if node.get_type_name() not in OPENVINO_CONVOLUTIONS or softmax:  # DFL's convolution: see _is_dfl
            stack.extend(value.get_node() for value in node.input_values())
    return list(head)


class _Reader:
    """ONNX Runtime's CalibrationDataReader: one input feed per calibration tensor, a range of them at a time
    (`set_range`, which quantize_static calls with its `CalibStridedMinMax` option)."""

    def __init__(self, name: str, tensors: Sequence[np.ndarray], step: Callable[[], None]) -> None:
        self._name, self._tensors, self._step = name, tensors, step
        self.set_range(0, len(tensors))

    def __len__(self) -> int:
        return len(self._tensors)

    def set_range(self, start_index: int, end_index: int) -> None:
        self._feeds: Iterator[int] = iter(range(start_index, min(end_index, len(self._tensors))))

    def get_next(self) -> dict[str, np.ndarray] | None:
        index = next(self._feeds, None)
        if index is None:
            return None
        self._step()
        return {self._name: self._tensors[index]}


def quantised_ops(source: Path) -> str:
    """What in `source` is quantised already ("64 ConvInteger, 59 DynamicQuantizeLinear"), or "". Such a file (the
    shared yolov8n_int8.onnx, dynamically quantised; an SSD converted from its uint8 TFLite) cannot be calibrated
    again: ONNX Runtime's calibrator fails on it, and NNCF's IR of it agreed 0.0 with it."""
    if source.suffix == ".xml":
        kinds = _openvino_kinds(source)
    else:
        import onnx

        kinds = Counter(node.op_type for node in onnx.load(str(source), load_external_data=False).graph.node)
    quantised = {
        kind: count
        for kind, count in kinds.items()
        if kind.startswith(QUANTISED_OPS) or "Integer" in kind or kind in OPENVINO_QUANTISED
    }
    return ", ".join(f"{count} {kind}" for kind, count in sorted(quantised.items(), key=lambda kc: -kc[1]))


def _openvino_kinds(source: Path) -> Counter[str]:
    """An IR's operations by type, its constants by element type ("i8 Constant"): NNCF's int8 IR has FakeQuantize
    on activations, or int8 weights alone where only the weights were compressed."""
    import openvino as ov

    kinds: Counter[str] = Counter()
    for op in ov.Core().read_model(str(source)).get_ops():
        kind = op.get_type_name()
        kinds[f"{op.get_element_type().get_type_name()} {kind}" if kind == "Constant" else kind] += 1
    return kinds


def input_shape(source: Path) -> list[int | str]:
    """The model's input shape as its file declares it, a name or "?" where a side is left open (a dynamic
    export: Ultralytics' `dynamic=True`)."""
    if source.suffix == ".xml":
        import openvino as ov

        shape = ov.Core().read_model(str(source)).inputs[0].get_partial_shape()
        return [dim.get_length() if dim.is_static else "?" for dim in shape]
    import onnx

    graph = onnx.load(str(source), load_external_data=False).graph
    dims = graph_inputs(graph)[0].type.tensor_type.shape.dim
    return [dim.dim_value if dim.HasField("dim_value") else dim.dim_param or "?" for dim in dims]


def onnx_batch_of_one(model: Any) -> Any:
    """An ONNX graph's open batch (torch.onnx's `dynamic_axes={"images": {0: "batch"}}`) set to 1, as the pipeline
    feeds frames: left open, ONNX Runtime's quantisation pre-processing failed ("Incomplete symbolic shape
    inference")."""
    for value in (*graph_inputs(model.graph), *model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            dims[0].dim_value = 1
    return model


def graph_inputs(graph: Any) -> list[Any]:
    """An ONNX graph's real inputs: old exporters (IR 3-6: NanoDet-m's) list every weight among them too."""
    weights = {initializer.name for initializer in graph.initializer}
    return [value for value in graph.input if value.name not in weights]


def _weights_not_inputs(model: Any) -> Any:
    """`model` without the graph inputs that only name its own weights. Listed as inputs, each is overridable:
    ONNX Runtime's calibrator then cannot tell that Resize's empty `scales` is empty, and fails its shape inference
    ("Either `sizes` or `scales`")."""
    inputs = graph_inputs(model.graph)
    if len(inputs) < len(model.graph.input):
        del model.graph.input[:]
        model.graph.input.extend(inputs)
    return model


def calibration_chunk(frames: int) -> int:
    """Frames per pass of ONNX Runtime's calibrator: the largest divisor of `frames` up to CALIBRATION_CHUNK (its
    strided option takes only a divisor)."""
    return max(size for size in range(1, min(frames, CALIBRATION_CHUNK) + 1) if frames % size == 0)


def onnx_int8(
    source: Path,
    target: Path,
    tensors: Sequence[np.ndarray],
    method: str,
    step: Callable[[], None] = lambda: None,
    stem_convs: int = STEM_CONVS,
    operators: str = "qdq",
) -> dict[str, Any]:
    """`source` quantised to `target` (QDQ, int8 weights per channel, uint8 activations), the stem and the head in
    float; what was done, for the record. `stem_convs`: the stem's convolutions (0: the head alone in float);
    `operators`: qdq or qoperator (ONNX Runtime's QLinear* operators written out; the same kernels run once ONNX
    Runtime fuses QDQ). `benchmarks/int8_layers.py` weighs what each costs and buys."""
    try:
        import onnx
        import sympy  # noqa: F401 - quant_pre_process's symbolic shape inference needs it, and says so only there
        from onnx import version_converter
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process
    except ImportError:
        raise EdgeError(f"onnx-int8 needs onnx and sympy: {CONVERT_EXTRA}") from None
    model = onnx_batch_of_one(_weights_not_inputs(onnx.load(str(source))))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), QDQ_OPSET)
    with tempfile.TemporaryDirectory(prefix=work_prefix(), dir=target.parent) as work:
        upgraded, prepared = Path(work) / "upgraded.onnx", Path(work) / "prepared.onnx"
        onnx.save(version_converter.convert_version(model, QDQ_OPSET) if opset < QDQ_OPSET else model, str(upgraded))
        quant_pre_process(str(upgraded), str(prepared), skip_symbolic_shape=False)
        prepared_model = onnx.load(str(prepared))
        kept = list(dict.fromkeys(onnx_stem(prepared_model, stem_convs) + onnx_head(prepared_model)))
        methods = {
            "minmax": CalibrationMethod.MinMax,
            "entropy": CalibrationMethod.Entropy,
            "percentile": CalibrationMethod.Percentile,
        }
        with contextlib.redirect_stdout(sys.stderr):  # its calibrator prints progress: stdout is the command's table
            quantize_static(
                str(prepared),
                str(target),
                _Reader(model.graph.input[0].name, tensors, step),
                quant_format=QuantFormat[FORMATS[operators]],
                per_channel=True,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                calibrate_method=methods[method],
                nodes_to_exclude=kept,
                extra_options={"CalibStridedMinMax": calibration_chunk(len(tensors))},
            )
    import onnxruntime

    return {
        "toolchain": f"onnxruntime {onnxruntime.__version__} quantize_static",
        "format": f"{FORMATS[operators]}, int8 weights per channel, uint8 activations",
        "calibration_method": method,
        "opset": max(opset, QDQ_OPSET),
        "kept_in_float": kept,
    }


def openvino_int8(
    source: Path,
    target: Path,
    tensors: Sequence[np.ndarray],
    step: Callable[[], None] = lambda: None,
    stem_convs: int = STEM_CONVS,
) -> dict[str, Any]:
    """`source` (ONNX or IR) quantised by NNCF to an int8 IR at `target` (.xml, .bin beside it), the stem and the
    head in float."""
    try:
        import nncf
        import openvino as ov
    except ImportError:
        raise EdgeError(f"openvino-int8 needs NNCF and OpenVINO: {install_extra('convert,openvino')}") from None
    nncf.set_log_level(logging.WARNING)  # its INFO lines name each operation it leaves alone: hundreds
    # convert_model, as NNCF's own examples do: its fusions make each SiLU one Swish, which NNCF leaves whole and
    # OpenVINO fuses into the int8 convolution. read_model's raw ONNX graph (x * Sigmoid(x)) had NNCF quantise both
    # factors: 100 unfused SiLUs, 1.22x the float model's CPU per frame on yolox-nano (BENCHMARKS.md)
    model = ov.convert_model(str(source)) if source.suffix == ".onnx" else ov.Core().read_model(str(source))
    model = batch_of_one(model)  # as the engine runs it (an open image size is refused before: input_shape)
    kept = list(dict.fromkeys(openvino_stem(model, stem_convs) + openvino_head(model)))

    def counted(tensor: np.ndarray) -> np.ndarray:
        step()
        return tensor

    quantized = nncf.quantize(
        model,
        nncf.Dataset(tensors, counted),
        preset=nncf.QuantizationPreset.MIXED,
        subset_size=len(tensors),
        ignored_scope=nncf.IgnoredScope(names=kept, validate=False),
    )
    ov.save_model(quantized, str(target), compress_to_fp16=False)
    return {
        "toolchain": f"nncf {nncf.__version__} quantize, openvino {ov.__version__.split('-')[0]}",
        "format": "OpenVINO IR, int8 (NNCF's mixed preset: symmetric weights, asymmetric activations)",
        "calibration_method": "nncf (min-max statistics per tensor)",
        "kept_in_float": kept,
    }
