"""`edge backends`: every engine, whether it runs here, the devices it sees, and what it can run."""

from __future__ import annotations

import json

import click

from edge_inference.edge.backends_report import backends_report
from edge_inference.edge.cli.app import cli


@cli.command("backends")
@click.option("--json", "as_json", is_flag=True)
def backends(as_json: bool) -> None:
    """List inference backends, devices found and the registry models each can run."""
    rows = backends_report()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        mark = "yes" if row["available"] else "no"
        click.echo(f"{row['key']:<9} available: {mark:<4} {row['engine'] or ''}")
        for device in row["devices"]:
            click.echo(f"          device: {device}")
        if row["problem"]:
            click.echo(f"          why not: {row['problem']}")
        if not row["available"]:
            click.echo(f"          install: {row['install']}")
        click.echo(f"          models: {', '.join(row['models'])}")
