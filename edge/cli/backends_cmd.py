"""`edge backends`: every engine, whether it runs here, the devices it sees, and what it can run."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from edge_inference.edge.backends_report import backends_report
from edge_inference.edge.cli.app import cli


@cli.command("backends")
@click.option("--json", "as_json", is_flag=True)
def backends(as_json: bool) -> None:
    """List inference backends, devices found and the registry models each can run."""
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
