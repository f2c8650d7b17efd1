"""OpenVINO's precision on a CPU, chosen by measurement where its default is not f32.

On a CPU with AVX-512 BF16 or AMX, OpenVINO runs a float model in bf16 by default (`INFERENCE_PRECISION_HINT`).
Without AMX that costs more than f32 for small detectors: on an Intel Xeon with AVX-512 BF16, 1.11x yolox-nano's CPU
per frame and 1.52x a dense YOLOv8n's (issue 83). With `precision: auto`, a model compiled to anything but f32 is
timed once against f32 on this CPU (alternating rounds of a few inferences, CPU time from the kernel), the cheaper
is kept, and the choice is remembered per CPU, OpenVINO version and model file in the model cache, so the next
start reads it. The engine's own default stands unless f32 is clearly cheaper."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

RECORD = "openvino-precision.json"
ROUNDS = 4  # alternating rounds per precision
PER_ROUND = 3  # inferences a round (after one untimed)
CHEAPER = 0.95  # f32 is kept where it takes at most this share of the default's CPU


def quantised(model: Any) -> bool:
    """A model with int8 weights or fake-quantise steps: its convolutions run in int8 whatever the float precision,
    so timing two floats would buy little for its cost (a 640 model compiled twice)."""
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        if kind == "FakeQuantize" or (kind == "Constant" and op.get_element_type().to_dtype() in (np.int8, np.uint8)):
            return True
    return False


def precision_key(core: Any, path: Path, version: str, threads: int | None) -> str:
    stat = path.stat()
    cpu = core.get_property("CPU", "FULL_DEVICE_NAME")
    return f"{cpu}|openvino {version}|{path.name}|{stat.st_size}|{stat.st_mtime_ns}|{threads or 'auto'}"


def remembered(cache_dir: Path | None, key: str) -> dict[str, Any] | None:
    if cache_dir is None:
        return None
    try:
        found = json.loads((cache_dir / RECORD).read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, dict) and found.get("precision") in ("f32", "default") else None


def remember(cache_dir: Path | None, key: str, choice: dict[str, Any]) -> None:
    """Kept beside the engines' compiled caches; a cache that cannot be written only means measuring again."""
    if cache_dir is None:
        return
    record = cache_dir / RECORD
    try:
        known = json.loads(record.read_text()) if record.exists() else {}
        known = known if isinstance(known, dict) else {}
        known[key] = choice
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = record.with_name(f".{record.name}.partial")
        partial.write_text(json.dumps(known, indent=1))
        partial.replace(record)
    except (OSError, ValueError):
        pass


def cpu_per_inference(compiled: Any) -> float | None:
    """Seconds of this process's CPU a request takes on a zero frame; None for an input whose size is open."""
    port = compiled.inputs[0]
    shape = port.get_partial_shape()
    if shape.is_dynamic:
        return None
    frame = np.zeros([dim.get_length() for dim in shape], dtype=port.get_element_type().to_dtype())
    request = compiled.create_infer_request()
    request.infer({0: frame})
    started = time.process_time()
    for _ in range(PER_ROUND):
        request.infer({0: frame})
    return (time.process_time() - started) / PER_ROUND


def compare(default: Any, f32: Any) -> tuple[float, float] | None:
    """CPU seconds per inference of each, over alternating rounds (a busy moment weighs on both alike)."""
    totals = [0.0, 0.0]
    for _ in range(ROUNDS):
        for side, compiled in enumerate((default, f32)):
            taken = cpu_per_inference(compiled)
            if taken is None:
                return None
            totals[side] += taken
    return totals[0] / ROUNDS, totals[1] / ROUNDS


def decided(measured: tuple[float, float], default: str) -> dict[str, Any]:
    """From (the default's, f32's) CPU per inference: f32 where it takes at most CHEAPER of the default's."""
    default_s, f32_s = measured
    ratio = default_s / f32_s if f32_s > 0 else 1.0
    return {
        "precision": "f32" if f32_s <= CHEAPER * default_s else "default",
        "default": default,
        "ratio": round(ratio, 3),
    }


def said(choice: dict[str, Any]) -> str:
    ratio, default = choice["ratio"], choice["default"]
    if choice["precision"] == "f32":
        return (
            f"OpenVINO runs this model in f32 on this CPU: its default, {default}, took {ratio:.2f}x the CPU per "
            "inference (measured once for this CPU and model; engine option openvino.precision sets it)"
        )
    return f"OpenVINO keeps its default {default} on this CPU ({ratio:.2f}x f32's CPU per inference, measured once)"
