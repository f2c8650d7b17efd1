"""`edge doctor`: a readable report (or JSON) of what blocks serving or slows it, each with what to do."""

from __future__ import annotations

import json
import os
from dataclasses import asdict

import click

from edge_inference.cli.app import cli
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import get_settings
from edge_inference.edge.tools.doctor import Finding, blocks_serving, run_checks

MARKS = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "info": "--  "}


@cli.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Findings as JSON.")
@click.option("--user", help="Check device permissions for this user (the service's), not the current one.")
@click.option("--root", type=click.Path(file_okay=False), help="Read /sys, /proc and /dev under this folder.")
@click.option(
    "--server",
    "servers",
    multiple=True,
    help="A model on an inference server to reach: triton://HOST:PORT/MODEL or triton+grpc://... (repeatable).",
)
def doctor(as_json: bool, user: str | None, root: str | None, servers: tuple[str, ...]) -> None:
    """Check engines, accelerators, permissions, cameras, power, the model cache and the inference servers named;
    exit 1 when serving is blocked."""
    if root:
        os.environ["EDGE_SYSROOT"] = root
    try:
        findings = run_checks(get_settings(), user, list(servers))
    except KeyError:
        raise EdgeError(f"no user named {user!r} on this machine") from None
    blocked = blocks_serving(findings)
    if as_json:
        click.echo(json.dumps({"blocks_serving": blocked, "findings": [asdict(f) for f in findings]}, indent=2))
    else:
        _print(findings, blocked)
    raise SystemExit(1 if blocked else 0)


def _print(findings: list[Finding], blocked: bool) -> None:
    section = None
    for finding in findings:
        if finding.section != section:
            section = finding.section
            click.echo(f"\n{section}")
        click.echo(f"  {MARKS[finding.status]}  {finding.subject}: {finding.detail}")
        if finding.fix and finding.status in ("warn", "fail"):
            click.echo(f"        fix: {finding.fix}")
    problems = sum(f.status in ("warn", "fail") for f in findings)
    verdict = "serving is blocked" if blocked else "nothing blocks serving"
    click.echo(f"\n{problems} problem(s); {verdict}")
