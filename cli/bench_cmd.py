"""`edge bench`: compare models and backends on your own video."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import click

from edge_inference.cli.app import cli
from edge_inference.cli.options import home_expanded
from edge_inference.edge.detection.machine import describe_machine
from edge_inference.edge.errors import counted
from edge_inference.edge.secrets import mask_url
from edge_inference.edge.tools.bench import (
    parse_backends,
    parse_regions,
    plan,
    read_frames,
    run_pair,
    score_against_reference,
)
from edge_inference.edge.tools.bench_report import CHART_NEEDS, table, writable_folder, write_outputs


@cli.command()
@click.option("--source", "-s", required=True, help="Video file, camera index, stream URL, image folder.")
@click.option("--models", required=True, help="Comma-separated registry names, families or model files.")
@click.option(
    "--backends",
    "backend_list",
    required=True,
    help="Comma-separated backend[:device][@model], e.g. onnx,openvino:CPU,tflite,edgetpu:usb,onnx@yolox-nano-int8; "
    "or a model on a server, triton+grpc://HOST:PORT/NAME; one with a model of its own runs it beside each model's "
    "pairs and is scored against them.",
)
@click.option(
    "--regions",
    "region_list",
    default="full",
    show_default=True,
    help="Where each pair looks: full (the whole frame), tiles (overlapping tiles at the model's scale, for small "
    "objects in big frames), or full,tiles for both side by side; the first is the reference.",
)
@click.option("--frames", type=click.IntRange(1, 10_000), default=100, show_default=True)
@click.option("--step", type=click.IntRange(min=1), default=1, show_default=True, help="Take every Nth frame.")
@click.option("--warmup", type=click.IntRange(min=0), default=5, show_default=True)
@click.option(
    "--reference",
    help="backend[:device] whose detections the others are scored against (default: each model's first pair).",
)
@click.option("--conf", type=click.FloatRange(0, 1), default=0.25, show_default=True)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    callback=home_expanded,
    default=Path("bench-out"),
    show_default=True,
    help="Folder for bench.json, bench.csv and bench.png.",
)
@click.option("--no-progress", is_flag=True, help="No progress bar (there is none when stderr is not a terminal).")
def bench(
    source: str,
    models: str,
    backend_list: str,
    region_list: str,
    frames: int,
    step: int,
    warmup: int,
    reference: str | None,
    conf: float,
    out: Path,
    no_progress: bool,
) -> None:
    """Run every model x backend pair on the same frames; report latency, fps, CPU, memory and agreement."""
    from tqdm import tqdm

    names = [m.strip() for m in models.split(",") if m.strip()]
    pairs = plan(names, parse_backends(backend_list), reference, parse_regions(region_list))
    writable_folder(out)
    images = read_frames(source, frames, step)
    machine = describe_machine()
    shown = mask_url(source)  # the table, bench.json and bench.csv never carry a stream's password
    click.echo(f"edge bench: {counted(len(images), 'frame')} of {shown}, {counted(len(pairs), 'pair')}", err=True)
    results = []
    quiet = True if no_progress else None  # None: tqdm draws only on a terminal, never into a log file
    with tqdm(total=len(pairs) * len(images), disable=quiet, unit="frame", dynamic_ncols=True) as bar:
        for pair in pairs:
            bar.set_description(pair.label)
            result = run_pair(pair, images, conf=conf, warmup=warmup, settings=None, step=lambda: bar.update(1))
            if not result.ok:
                bar.update(len(images) - len(result.timings))
            results.append(result)
    score_against_reference(results, reference)
    click.echo(table(results, machine))
    meta = {"source": shown, "frames": len(images), "machine": machine, "python": platform.python_version()}
    paths = write_outputs(results, out, meta)
    click.echo(f"wrote {', '.join(str(p) for p in paths)}", err=True)
    if not any(p.suffix == ".png" for p in paths):
        click.echo(f"note: {CHART_NEEDS}", err=True)
    if not any(r.ok for r in results):
        click.echo(json.dumps([r.reason for r in results]), err=True)
        raise SystemExit(1)
