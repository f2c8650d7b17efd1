"""`edge bench` output: a table in the shape of Coral's "time per inference" table, JSON, CSV and a PNG chart."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from edge_inference.edge.detection.timings import percentile
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.secrets import mask_text
from edge_inference.edge.tools.bench import PairResult
from edge_inference.edge.tools.folders import ensure_writable
from edge_inference.extras import install_extra
from edge_inference.models.agreement import ENOUGH_BOXES
from edge_inference.models.registry import REGISTRY


def summary(result: PairResult) -> dict[str, Any]:
    row: dict[str, Any] = {
        "model": result.pair.model,
        "backend": result.pair.backend,
        "regions": result.pair.regions,
        "device": result.device or result.pair.device,
        "file": result.file,
        "engine": result.engine,
        "frames": len(result.timings),
        "reference": result.reference,
        "status": "ok" if result.ok else "not run",
        "reason": None if result.reason is None else mask_text(result.reason),
    }
    if not result.ok:
        return row
    stages = {
        "preprocess": [t.preprocess_ms for t in result.timings],
        "inference": [t.inference_ms for t in result.timings],
        "postprocess": [t.postprocess_ms for t in result.timings],
        "end_to_end": [t.total_ms for t in result.timings],
    }
    for stage, values in stages.items():
        for q in (50, 95, 99):
            row[f"{stage}_p{q}_ms"] = round(percentile(values, q), 3)
    row.update(
        fps=round(result.fps, 2),
        cpu_percent=round(result.cpu_percent, 1),
        cpu_ms_per_frame=round(result.cpu_ms_per_frame, 2),
        peak_rss_mib=round(result.peak_rss_mib, 1),
        map50=None if result.agreement is None or result.agreement.map50 is None else round(result.agreement.map50, 4),
        agreement=None if result.agreement is None else result.agreement.to_dict(),
    )
    return row


def table(results: list[PairResult], machine: str) -> str:
    rows = [summary(result) for result in results]
    for row in rows:  # a pair on tiles is its backend's own line: `onnx on tiles`
        row["backend"] = row["backend"] if row["regions"] == "full" else f"{row['backend']} on {row['regions']}"
    # as wide as the longest name: `onnx@yolox-nano-int8` ran into the device column
    m, b = (max([width, *(len(str(row[key])) + 1 for row in rows)]) for key, width in (("model", 20), ("backend", 10)))
    header = (
        f"{'Model':<{m}}{'Backend':<{b}}{'Device':<26}{'pre':>6}{'infer p50':>10}{'p95':>7}{'p99':>7}{'post':>6}"
        f"{'e2e p50':>8}{'p95':>7}{'fps':>7}{'CPU ms':>7}{'CPU%':>6}{'RSS MiB':>8}{'mAP50':>7}"
    )
    lines = [
        f"# {machine}",
        "# times in ms per frame; CPU ms = the process's CPU per frame (all threads), CPU% = of one core;"
        f" mAP50 = agreement with the reference pair (ref), over the classes it found {ENOUGH_BOXES} times or more",
        header,
    ]
    for result, row in zip(results, rows, strict=True):
        device = str(row["device"])[:25]
        if not result.ok:
            lines.append(f"{row['model']:<{m}}{row['backend']:<{b}}{device:<26}not run: {row['reason']}")
            continue
        agree = "ref" if result.reference else ("-" if row["map50"] is None else f"{row['map50']:.3f}")
        lines.append(
            f"{row['model']:<{m}}{row['backend']:<{b}}{device:<26}{row['preprocess_p50_ms']:>6.2f}"
            f"{row['inference_p50_ms']:>10.2f}{row['inference_p95_ms']:>7.2f}{row['inference_p99_ms']:>7.2f}"
            f"{row['postprocess_p50_ms']:>6.2f}{row['end_to_end_p50_ms']:>8.2f}{row['end_to_end_p95_ms']:>7.2f}"
            f"{row['fps']:>7.1f}{row['cpu_ms_per_frame']:>7.1f}{row['cpu_percent']:>6.0f}{row['peak_rss_mib']:>8.0f}{agree:>7}"
        )
    return "\n".join(lines + agreement_notes(results))


def agreement_notes(results: list[PairResult]) -> list[str]:
    """Under the table: why a pair agrees with its model's reference pair less than rounding explains (one of the two
    files is a conversion with another NMS or another quantisation), where the figure is read."""
    references = {r.pair.model: r.file for r in results if r.reference}
    compared: dict[tuple[str | None, str], list[str]] = {}  # (reference, why) -> the files it explains, once each
    for result in results:
        reference = references.get(result.pair.model)
        if not result.ok or result.reference or result.file == reference:
            continue  # the reference file on another engine: no conversion between them to explain
        entry = next((e for n in (result.file, reference) if (e := REGISTRY.get(n or "")) and e.differs), None)
        if entry is not None and result.file not in (files := compared.setdefault((reference, entry.differs), [])):
            files.append(str(result.file))
    return [
        f"# mAP50 of {' and '.join(files)} against {reference}: {why}" for (reference, why), files in compared.items()
    ]


def writable_folder(out: Path) -> None:
    """`--out` made and written to before the run, so minutes of measuring are not lost to a folder that cannot
    hold the results."""
    if out.exists() and not out.is_dir():
        raise EdgeError(f"--out {out} is a file: give it a folder (made if missing) for bench.json, .csv and .png")
    try:
        ensure_writable(out)
    except OSError as exc:
        raise EdgeError(
            f"cannot write the results to {out} ({exc.strerror or exc}): give --out a folder you can write"
        ) from None


def write_outputs(results: list[PairResult], out: Path, meta: dict[str, Any]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    rows = [summary(r) for r in results]
    json_path, csv_path, png_path = out / "bench.json", out / "bench.csv", out / "bench.png"
    json_path.write_text(json.dumps({**meta, "pairs": rows}, indent=2))
    columns = sorted(
        {k for row in rows for k in row if k != "agreement"},
        key=lambda k: list(rows[0]).index(k) if k in rows[0] else 99,
    )
    with csv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    if not _chart([r for r in results if r.ok], png_path, meta.get("machine", "")):
        return [json_path, csv_path]
    return [json_path, csv_path, png_path]


def plot_label(result: PairResult) -> str:
    """The chart's name for a pair: the model on its engine, then the device that ran it (once, not as asked and
    again as it ran)."""
    return f"{result.pair.model} @ {result.pair.backend}\n{result.device or result.pair.device}"


CHART_NEEDS = f"no bench.png: the chart needs matplotlib ({install_extra('bench')})"


def _chart(results: list[PairResult], path: Path, machine: str) -> bool:
    """The latency chart; False where matplotlib is not installed (the basic install: the table says it all)."""
    try:
        import matplotlib
    except ImportError:
        return False

    matplotlib.use("Agg")  # files only; the service and CI have no display
    import matplotlib.pyplot as plt

    height = max(2.5, 0.55 * len(results) + 1.2)
    fig, ax = plt.subplots(figsize=(10, height), dpi=110)
    if results:
        data = [[t.total_ms for t in r.timings] for r in results]
        labels = [plot_label(r) for r in results]
        parts = ax.violinplot(data, vert=False, showmedians=True, showextrema=False)
        for body in parts["bodies"]:  # type: ignore[attr-defined]
            body.set_alpha(0.45)
        ax.boxplot(data, vert=False, widths=0.15, showfliers=False)
        ax.set_yticks(range(1, len(results) + 1), labels, fontsize=8)
        ax.set_xlabel("end-to-end ms per frame (pre-process + inference + post-process)")
    else:
        ax.text(0.5, 0.5, "no pair could run here", ha="center", va="center")
    ax.set_title(f"Latency distribution per model @ backend\n{machine}", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True
