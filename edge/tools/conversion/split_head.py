"""Rockchip's split head for a YOLOv8/YOLO11 ONNX export (`edge models convert --to rknn --split-head`).

rknn_model_zoo converts YOLOv8 and YOLO11 from airockchip's fork of Ultralytics, whose Detect head, exported for
rknn, returns per stride (8, 16, 32) the box branch's DFL logits (1, 64, H, W), the class branch's sigmoid
(1, C, H, W) and the sum of the class scores clipped to 1 (1, 1, H, W), and leaves DFL and the box arithmetic to the
CPU: DFL runs poorly on the NPU, and one int8 tensor holding coordinates (0-640) and scores (0-1) quantises the scores
badly. This makes the same outputs from a stock Ultralytics export by graph surgery, so a user needs no fork: the
`yolov8-rknn` decoder reads them.

The branches are found from the graph, not by name: walking back from the output, the first tensors on a stride's
grid (the model's input size over 8, 16, 32) are what the head's last convolutions made. Older exports concatenate a
stride's two branches first (1, 64 + C, H, W): the walk goes through that Concat to the branches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edge_inference.edge.errors import EdgeError
from edge_inference.edge.tools.conversion.quantize import graph_inputs

STRIDES = (8, 16, 32)
BOX_CHANNELS = 64  # 4 sides x 16 DFL bins (Ultralytics' reg_max)
SPLIT_DECODER = "yolov8-rknn"
ZERO, ONE, AXIS = "split_head_zero", "split_head_one", "split_head_axis"  # the constants the new nodes take
SPLIT_RECORD = (
    "split as rknn_model_zoo splits it: per stride the DFL box logits, the class scores and their clipped sum; "
    "DFL and the boxes on the CPU (the yolov8-rknn decoder)"
)


def _dims(value: Any) -> tuple[int, ...] | None:
    shape = value.type.tensor_type.shape
    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in shape.dim)
    return dims if dims and -1 not in dims else None


def _branches(model: Any, grids: dict[tuple[int, int], int]) -> dict[int, dict[int, str]]:
    """stride -> {channels: tensor} of the tensors the head starts from, walking back from the output."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: _dims(v) for v in [*inferred.graph.value_info, *inferred.graph.output]}
    made_by = {out: node for node in model.graph.node for out in node.output}
    found: dict[int, dict[int, str]] = {}
    stack, seen = [model.graph.output[0].name], set()
    while stack:
        tensor = stack.pop()
        node = made_by.get(tensor)
        if tensor in seen or node is None:
            continue
        seen.add(tensor)
        shape = shapes.get(tensor)
        stride = grids.get(shape[2:]) if shape is not None and len(shape) == 4 else None
        if stride is None or node.op_type == "Concat":  # a stride's two branches concatenated: go through
            stack.extend(node.input)
            continue
        found.setdefault(stride, {})[shape[1]] = tensor  # type: ignore[index]
    return found


def _export_sizes(graph: Any) -> tuple[int, int, int]:
    """(classes, input height, input width) of an Ultralytics detection export, or an EdgeError saying why not."""
    inputs = graph_inputs(graph)
    size = (_dims(inputs[0]) if inputs else None) or ()
    out = _dims(graph.output[0]) if len(graph.output) == 1 else None
    cells = sum((size[2] // s) * (size[3] // s) for s in STRIDES) if len(size) == 4 else 0
    if out is None or (len(out), out[2:]) != (3, (cells,)) or out[1] <= 4:
        found = f"its output is {out}" if out is not None else "it has more than one output or a dynamic one"
        raise EdgeError(
            "--split-head takes a YOLOv8/YOLO11 detection export, whose one output is (1, 4 + classes, cells of "
            f"strides 8, 16, 32): {found}; convert it without --split-head"
        )
    if out[1] - 4 == BOX_CHANNELS:
        raise EdgeError(f"--split-head cannot tell a {BOX_CHANNELS}-class head's branches apart by their channels")
    return out[1] - 4, size[2], size[3]


def _stride_outputs(stride: int, box: str, logits: str, opset: int) -> tuple[list[Any], list[str]]:
    """One stride's new nodes (the class scores' sigmoid, their sum clipped to 1) and its three output tensors."""
    from onnx import helper

    scores, summed, clipped = f"class{stride}", f"class_sum_raw{stride}", f"class_sum{stride}"
    if opset >= 13:  # ReduceSum's axes became an input in opset 13
        reduce = helper.make_node("ReduceSum", [scores, AXIS], [summed], name=f"split_head_sum{stride}", keepdims=1)
    else:
        reduce = helper.make_node("ReduceSum", [scores], [summed], name=f"split_head_sum{stride}", axes=[1], keepdims=1)
    nodes = [
        helper.make_node("Sigmoid", [logits], [scores], name=f"split_head_sigmoid{stride}"),
        reduce,
        helper.make_node("Clip", [summed, ZERO, ONE], [clipped], name=f"split_head_clip{stride}"),
    ]
    return nodes, [box, scores, clipped]


def split_yolov8_head(model: Any) -> Any:
    """`model` (an Ultralytics YOLOv8/YOLO11 detection export: one output (1, 4 + C, N)) with rknn_model_zoo's nine
    outputs in its place, what fed only the old output removed (a new model; `model` is changed on the way). An
    EdgeError says why a model is not one."""
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    classes, height, width = _export_sizes(graph)
    branches = _branches(model, {(height // s, width // s): s for s in STRIDES})
    if sorted(branches) != list(STRIDES) or any(set(b) != {BOX_CHANNELS, classes} for b in branches.values()):
        raise EdgeError(
            "--split-head found no YOLOv8/YOLO11 head in this model (per stride a 64-channel box branch and a "
            f"{classes}-class branch): it is rknn_model_zoo's layout for those two families only"
        )
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    constants = {ZERO: np.array(0.0, "float32"), ONE: np.array(1.0, "float32"), AXIS: np.array([1], "int64")}
    graph.initializer.extend(numpy_helper.from_array(value, name) for name, value in constants.items())
    outputs = []
    for stride in STRIDES:
        nodes, names = _stride_outputs(stride, branches[stride][BOX_CHANNELS], branches[stride][classes], opset)
        graph.node.extend(nodes)
        grid = (height // stride, width // stride)
        outputs += [
            helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, (1, channels, *grid))
            for name, channels in zip(names, (BOX_CHANNELS, classes, 1), strict=True)
        ]
    del graph.output[:]
    graph.output.extend(outputs)
    inputs = [value.name for value in graph_inputs(graph)]
    # what no new output needs (DFL, the box arithmetic, the old concatenations) left out by onnx's own extractor
    split = onnx.utils.Extractor(model).extract_model(inputs, [output.name for output in outputs])
    onnx.checker.check_model(split)
    return split


def splittable(source: Path, asked: bool | None) -> bool:
    """Whether `--to rknn` splits `source`'s head: where asked (an EdgeError, before any footage is read, where it
    has no head to split), else by default where it is YOLOv8/YOLO11's. rknn-toolkit2 2.5.0 cannot build the single
    head of a stock Ultralytics export at all (its graph optimizer fails in DFL's reshape and split), and the zoo
    converts those models split."""
    import onnx

    if asked is False:
        return False
    try:
        split_yolov8_head(onnx.load(str(source), load_external_data=False))
    except EdgeError:
        if asked:
            raise
        return False
    return True
