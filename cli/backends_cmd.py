"""`edge backends`: every engine, whether it runs here, the devices it sees, and what it can run."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from edge_inference.cli.app import cli
from edge_inference.edge.detection.loader import DetectorConfig, check_reference
from edge_inference.edge.settings import get_settings
from edge_inference.edge.tools.backends_report import backends_report

FRAMES_TIMED = 30  # `--frames VIDEO`: its first frames, run in turn by each engine


@cli.command("backends")
@click.option("--json", "as_json", is_flag=True)
@click.option(
    "--bench",
    "bench_model",
    metavar="MODEL",
    help="Time every engine that can run MODEL here, as --backend auto does, and keep the result for it.",
)
@click.option("--frames", "frames_from", metavar="VIDEO", help="With --bench: time on this video or image's frames.")
def backends(as_json: bool, bench_model: str | None, frames_from: str | None) -> None:
    """List inference backends, devices found and the registry models each can run."""
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


def _bench(model: str, as_json: bool, frames_from: str | None) -> None:
    from edge_inference.edge.detection.auto.candidates import candidates
    from edge_inference.edge.detection.auto.figures import certainty, fastest
    from edge_inference.edge.detection.auto.store import check_cache_writable
    from edge_inference.edge.detection.auto.timing import measure
    from edge_inference.edge.tools.bench import read_frames

    settings = get_settings()
    files = check_reference(DetectorConfig(model), settings)
    check_cache_writable(settings)  # said before minutes of timing, not after them in place of the table
    # decoded once here (a missing or undecodable file is one line, not a failure per engine), read by each child
    frames = read_frames(frames_from, FRAMES_TIMED) if frames_from else None
    say = lambda line: click.echo(line, err=True)  # noqa: E731 - progress on stderr, the table on stdout
    _, results = measure(candidates(files, settings), model, settings, say=say, frames=frames)
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
