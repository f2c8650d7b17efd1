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
@click.option("--candidate", hidden=True)  # --backend auto's own call: time one engine (JSON), print its figures
def backends(as_json: bool, bench_model: str | None, candidate: str | None) -> None:
    """List inference backends, devices found and the registry models each can run."""
    if bench_model and candidate:
        _bench_one(bench_model, candidate)
        return
    if bench_model:
        _bench(bench_model, as_json)
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
        models = ", ".join(report.models) or "none in the registry: bring your own file (README, Hardware)"
        click.echo(f"          models: {models}")
        for option in report.options:
            described = f"{option['type']}, default {option['default']}"
            click.echo(f"          option {report.key}.{option['name']} ({described}): {option['help']}")


def _bench_one(model: str, candidate: str) -> None:
    from edge_inference.edge.detection.autoselect import Candidate, measure_one

    settings = get_settings()

    def load(name: str, backend: str, device: str) -> Detector:
        return load_detector(DetectorConfig(name, backend, device), settings)

    result = measure_one(Candidate(**json.loads(candidate)), load)
    click.echo(json.dumps(asdict(result)))


def _bench(model: str, as_json: bool) -> None:
    from edge_inference.edge.detection.autoselect import fastest, measure

    check_reference(DetectorConfig(model))
    _, results = measure(model, get_settings(), say=lambda line: click.echo(line, err=True))
    if as_json:
        click.echo(json.dumps([asdict(r) | {"fps": r.fps} for r in results], indent=2))
        return
    best = fastest(results)
    click.echo(f"\n{'backend':<10}{'device':<24}{'ms/frame':>10}{'fps':>8}  model")
    for result in sorted(results, key=lambda r: r.ms_p50 or float("inf")):
        timing = f"{result.ms_p50:>10.1f}{result.fps or 0:>8.1f}" if result.ms_p50 else f"{'-':>10}{'-':>8}"
        mark = "  <- --backend auto" if result is best else ""
        click.echo(f"{result.backend:<10}{result.device[:23]:<24}{timing}  {result.model}{mark}")
        if result.error:
            click.echo(f"{'':<10}cannot run here: {result.error}")
    click.echo("(one frame: pre-processing, inference and decoding; median of warm runs)")
