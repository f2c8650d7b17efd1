"""The operator's tools: `edge bench` and its report, `edge doctor`, the backends report, and `conversion/` (`edge
models convert`).

May import edge.stream, edge.detection and the shared modules; never the runtime or the event layer.
"""
