"""A float YOLOv8n for the tests, made from the shared `yolov8n_int8.onnx` (Ultralytics' export, then ONNX Runtime's
dynamic quantisation): each `DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul(scales) [-> Add(bias)]` chain back
to one float `Conv` with the dequantised weights and its bias, as Ultralytics exported it. Written to a temporary
folder by the test that needs it (the file is AGPL-3.0: never a default, never in the repository)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def float_yolov8n(source: Path, target: Path) -> Path:
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    made_by = {out: node for node in graph.node for out in node.output}
    used_by: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            used_by.setdefault(name, []).append(node)
    replaced: dict[str, Any] = {}
    dropped: set[str] = set()
    weights: list[Any] = []
    for node in (n for n in graph.node if n.op_type == "ConvInteger"):
        x = made_by[node.input[0]].input[0]  # the float tensor DynamicQuantizeLinear quantised
        name = node.input[1].removesuffix("_quantized")
        scale = constants[f"{name}_scale"].astype(np.float32)
        w = constants[node.input[1]].astype(np.float32) - constants[node.input[3]].astype(np.float32)
        weights.append(numpy_helper.from_array(w * (scale.reshape(-1, 1, 1, 1) if scale.ndim else scale), name))
        (cast,) = used_by[node.output[0]]
        (scaled,) = used_by[cast.output[0]]
        (add,) = used_by[scaled.output[0]]
        bias = made_by.get(next(i for i in add.input if i != scaled.output[0]))
        if bias is not None and bias.op_type == "Reshape" and bias.input[0] in constants:  # the conv's own bias
            conv = helper.make_node(
                "Conv", [x, name, bias.input[0]], [add.output[0]], name=node.name.removesuffix("_quant")
            )
            replaced[add.name], dropped = conv, dropped | {node.name, cast.name, scaled.name}
        else:  # DFL's bias-free convolution
            conv = helper.make_node("Conv", [x, name], [scaled.output[0]], name=node.name.removesuffix("_quant"))
            replaced[scaled.name], dropped = conv, dropped | {node.name, cast.name}
        conv.attribute.extend(node.attribute)
    nodes = [replaced.get(node.name, node) for node in graph.node if node.name not in dropped]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(weights)
    inputs = [i.name for i in graph.input if i.name not in constants]
    floating = onnx.utils.Extractor(model).extract_model(inputs, [output.name for output in graph.output])
    onnx.checker.check_model(floating)
    onnx.save(floating, str(target))
    return target
