"""What to do with an int8 file, from its agreement with the float model and what it costs beside it, measured in
alternating blocks: a verdict from the blocks' spread, never from one figure. A ratio whose interval reaches the
line the verdict turns on is said as "no measurable difference" (or "too close to tell"), so that the same files
measured again give the same verdict (issue 83: one OpenVINO int8 file read 0.879 and 0.918 of float in two runs,
and the verdict flipped at 0.90)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from edge_inference.edge.detection.machine import cpu_model_and_flags
from edge_inference.models.agreement import ENOUGH_BOXES

AGREES = 0.90  # below this mAP@0.5 against the float model, the verdict says to keep the float one
# int8 that saves less than this share of the float model's CPU is not worth its differences. On an AVX2 CPU
# without VNNI (AMD Zen 3) yolox-nano's int8 read 0.99x on ONNX Runtime, and the verdict said "use it"
WORTH = 0.90
SAME = 0.05  # within 5% of the float model's CPU either way: no difference a user would see
INT8_INSTRUCTIONS = ("avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm")  # int8 dot products, per core
VNNI = ("avx512_vnni", "avx_vnni", "amx_int8")
# Student's t at 97.5% by degrees of freedom (a two-sided 95% interval); 1.96 past the table
T_975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 12: 2.18,
         15: 2.13, 20: 2.09, 30: 2.04}  # fmt: skip


def ratio_interval(float_cpu: Sequence[float], int8_cpu: Sequence[float]) -> tuple[float, float] | None:
    """A 95% interval of int8's CPU over the float model's, from the blocks both ran on the same frames (the
    log of each block's ratio, t-distributed); None with fewer than three blocks."""
    logs = [math.log(i / f) for f, i in zip(float_cpu, int8_cpu, strict=True) if f > 0 and i > 0]
    if len(logs) < 3:
        return None
    degrees = len(logs) - 1
    t = T_975[max(df for df in T_975 if df <= degrees)] if degrees <= 30 else 1.96  # between rows: the wider
    half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    centre = statistics.fmean(logs)
    return math.exp(centre - half), math.exp(centre + half)


def judged_on() -> str:
    """The CPU a verdict was measured on, and its int8 instructions: the same file costs otherwise on another."""
    cpu, flags = cpu_model_and_flags()
    int8 = [flag for flag in flags if flag in INT8_INSTRUCTIONS]
    return f"{cpu} ({' '.join(int8) if int8 else 'no int8 dot-product instructions'})"


def verdict(table: dict[str, Any], where: str | None = None) -> str:
    """What to do with the int8 file; `where` (judged_on()) is said beside a figure measured on this CPU, with the
    warning ONNX Runtime's quantisation docs give: an int8 file judged with VNNI may saturate on an AVX2-only CPU."""
    said = _verdict(table)
    if where is None or table["cpu_ratio"] is None:
        return said
    caveat = ""
    if "use it" in said and any(flag in where for flag in VNNI):
        caveat = "; on a CPU without VNNI its activations may saturate: convert and judge it there"
    return f"{said} (judged on {where}{caveat})"


def _verdict(table: dict[str, Any]) -> str:
    agreed, ratio = table["agreement_map50"], table["cpu_ratio"]
    if agreed is None:
        return (
            f"the float model found no class {ENOUGH_BOXES} times on the evaluation frames: nothing to judge the "
            "conversion by; evaluate on other frames (--eval) or more of them (--frames)"
        )
    if agreed < AGREES:
        return (
            f"int8 agrees {agreed:.3f} with the float model (< {AGREES}): keep the float model, or calibrate on "
            "more frames of the camera"
        )
    if ratio is None:  # run on a simulator: its speed is the board's to show
        return f"int8 agrees {agreed:.3f} with the float model: use it, and time it on the board (`edge bench`)"
    low, high = table.get("cpu_ratio_interval") or (ratio, ratio)
    cost = f"{ratio:.2f}x its CPU per frame" + (f" ({low:.2f}-{high:.2f})" if low < high else "")
    if high <= WORTH:
        return f"int8 agrees {agreed:.3f} with the float model at {cost}: use it"
    keep = "keep the float model on this machine"
    if low <= 1 + SAME and high >= 1 - SAME:
        return (
            f"int8 agrees {agreed:.3f} with the float model, at no measurable difference in CPU here ({cost}): {keep}"
        )
    if low >= 1:  # agreeing is not enough: on this CPU the engine runs the float model for less
        return f"int8 agrees {agreed:.3f} with the float model but takes {cost} here: {keep}"
    if low <= WORTH:
        return (
            f"int8 agrees {agreed:.3f} with the float model, at {cost}: too close to {WORTH}x to tell whether it "
            f"saves a tenth here; {keep}, or judge it on more frames (--frames)"
        )
    return (
        f"int8 agrees {agreed:.3f} with the float model but saves little CPU here ({cost}): {keep} (int8 pays "
        "where the CPU has int8 dot-product instructions, VNNI or Arm's, or on an NPU)"
    )
