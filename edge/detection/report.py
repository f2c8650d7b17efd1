"""The JSON record of one detection result (shared by `edge detect --json` and `POST /detect`) and its table form."""

from __future__ import annotations

from typing import Any

from edge_inference.edge.detection.detector import DetectionResult, Detector


def result_record(source: str, result: DetectionResult, detector: Detector) -> dict[str, Any]:
    record = {
        "source": source,
        "width": result.width,
        "height": result.height,
        "model": detector.spec.name,
        "backend": f"{detector.backend.key}/{detector.backend.device}",
        "detections": [d.to_dict() for d in result.detections],
        "timings_ms": result.timings.to_dict(),
    }
    if result.layout is not None and result.layout.tiled:  # how the frame was cut, and what that cost
        record["regions"] = {"tiles": result.layout.describe(), "inferences": len(result.layout.regions)}
    chosen = detector.loop_threads.record if detector.loop_threads is not None else None
    if chosen is not None:  # a loop's engine threads, once measured: how many, and why
        record["engine_threads"] = chosen
    return record


def result_table(record: dict[str, Any]) -> str:
    t = record["timings_ms"]
    lines = [
        f"{record['source']}  {record['width']}x{record['height']}  {record['model']} on {record['backend']}  "
        f"pre {t['preprocess']:.1f} ms  inference {t['inference']:.1f} ms  post {t['postprocess']:.1f} ms",
    ]
    if "regions" in record:
        lines.append(f"  {record['regions']['tiles']}")
    if not record["detections"]:
        lines.append("  (no detections)")
        return "\n".join(lines)
    lines.append(f"  {'label':<16}{'score':>6}  {'x1':>7}{'y1':>7}{'x2':>7}{'y2':>7}")
    for d in record["detections"]:
        x1, y1, x2, y2 = d["box"]
        lines.append(f"  {d['label']:<16}{d['score']:>6.2f}  {x1:>7.1f}{y1:>7.1f}{x2:>7.1f}{y2:>7.1f}")
    return "\n".join(lines)
