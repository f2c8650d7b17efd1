"""`edge backends`: every engine, whether it runs here, the devices it sees, and what it can run."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from edge_inference.cli.app import cli
from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.loader import DetectorConfig, check_reference, load_detector
from edge_inference.edge.settings import get_settings
from edge_inference.edge.tools.backends_report import backends_report


@cli.command("backends")
@click.option("--json", "as_json", is_flag=True)
@click.option(
    "--bench",
    "bench_model",
    metavar="MODEL",
    help="Time every engine that can run MODEL here, as --backend auto does, and keep the result for it.",
)
@click.option("--frames", "frames_from", metavar="VIDEO", help="With --bench: time on this video or image's frames.")
@click.option("--candidate", hidden=True)  # --backend auto's own call: one engine (JSON), timed in rounds on stdin
def backends(as_json: bool, bench_model: str | None, frames_from: str | None, candidate: str | None) -> None:
    """List inference backends, devices found and the registry models each can run."""
    if bench_model and candidate:
        _bench_one(bench_model, candidate, frames_from)
        return
    if bench_model:
        _bench(bench_model, as_json, frames_from)
        return
    reports = backends_report()
    if as_json:
        click.echo(json.dumps([asdict(r) for r in reports], indent=2))
        return
    for report in reports:
        mark = "yes" if report.available else "no"
        click.echo(f"{report.key:<9} available: {mark:<4} {report.engine or ''}")
        for device in report.devices:
            click.echo(f"          device: {device}")
        if report.problem:
            click.echo(f"          why not: {report.problem}")
        if not report.available:
            click.echo(f"          install: {report.install}")
        models = ", ".join(report.models) or "none in the registry: bring your own file (docs/hardware/index.md)"
        click.echo(f"          models: {models}")
        for option in report.options:
            described = f"{option['type']}, default {option['default']}"
            click.echo(f"          option {report.key}.{option['name']} ({described}): {option['help']}")


def _bench_one(model: str, candidate: str, frames_from: str | None) -> None:
    import sys

    from edge_inference.edge.detection.autoselect import Candidate, bench_image, serve_rounds
    from edge_inference.edge.tools.bench import read_frames

    settings = get_settings()

    def load(name: str, backend: str, device: str) -> Detector:
        # timed as the service runs a camera's engine (its threads idle between frames, not spinning)
        return load_detector(DetectorConfig(name, backend, device, back_to_back=False), settings)

    frames = read_frames(frames_from, 30) if frames_from else [bench_image()]
    serve_rounds(Candidate(**json.loads(candidate)), load, frames, sys.stdin, sys.stdout)


def _bench(model: str, as_json: bool, frames_from: str | None) -> None:
    from edge_inference.edge.detection.autoselect import certainty, check_cache_writable, fastest, measure
    from edge_inference.edge.tools.bench import read_frames

    check_reference(DetectorConfig(model))
    check_cache_writable(get_settings())  # said before minutes of timing, not after them in place of the table
    if frames_from:
        read_frames(frames_from, 1)  # a missing or undecodable file is one line here, not a failure per engine
    _, results = measure(model, get_settings(), say=lambda line: click.echo(line, err=True), frames=frames_from)
    if as_json:
        rows = [asdict(r) | {"fps": r.fps, "best_fps": r.best_fps, "spread": round(r.spread, 3)} for r in results]
        click.echo(json.dumps({"results": rows, "certainty": certainty(results)}, indent=2))
        return
    best = fastest(results)
    click.echo(f"\n{'backend':<10}{'device':<24}{'best':>8}{'median':>8}{'spread':>8}{'CPU ms':>8}  model")
    for result in sorted(results, key=lambda r: -(r.best_fps or 0) if r.ms_p50 else float("inf")):
        figures = (
            (result.best_fps or 0, result.fps or 0, f"{result.spread:.0%}", result.cpu_ms or 0)
            if result.ms_p50
            else ("-", "-", "-", "-")
        )
        timing = "".join(f"{value:>8.1f}" if isinstance(value, float) else f"{value:>8}" for value in figures)
        mark = "  <- --backend auto" if result is best else ""
        click.echo(f"{result.backend:<10}{result.device[:23]:<24}{timing}  {result.model}{mark}")
        if result.error:
            click.echo(f"{'':<10}cannot run here: {result.error}")
    click.echo(
        "(frames per second on whole frames: pre-processing, inference and decoding; in rounds taken in turns, the"
        " best and the median; CPU per frame)"
    )
    click.echo(f"choice: {certainty(results)}")
