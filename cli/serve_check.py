"""`edge serve --check`: the findings of `edge.runtime.check`, the token files and the port, one line each, and an
exit status a unit's `ExecStartPre` or a deploy script can act on."""

from __future__ import annotations

import errno
import socket

import click

from edge_inference.cli.listening import bind_advice, listen
from edge_inference.edge.config import ServiceConfig
from edge_inference.edge.runtime.check import FAILURES, Finding, check_service
from edge_inference.edge.secrets import mask_text
from edge_inference.edge.settings import Settings


def report(config: ServiceConfig, settings: Settings) -> int:
    """Prints what `edge serve` would meet; 0 when nothing would stop it, 1 otherwise."""
    from edge_inference.service.access import AccessPolicy

    findings = []
    try:
        AccessPolicy.from_config(config.server, settings)  # reads the token files
    except FAILURES as exc:
        findings.append(Finding("server", str(exc), "problem"))
    findings += check_service(config, settings)
    findings.append(port_outlook(config.server.host, config.server.port))
    for finding in findings:
        prefix = "" if finding.level == "ok" else f"{finding.level}: "
        click.echo(mask_text(f"{prefix}{finding.subject}: {finding.text}"))
    problems = sum(f.level == "problem" for f in findings)
    warnings = sum(f.level == "warning" for f in findings)
    streams = len(config.streams)
    if problems:
        click.echo(f"check failed: {_count(problems, 'problem')} (above); {_count(warnings, 'warning')}")
        return 1
    click.echo(f"check passed: the service would start {_count(streams, 'stream')}; {_count(warnings, 'warning')}")
    return 0


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def port_outlook(host: str, port: int) -> Finding:
    """A port in use is a warning: the service this check is for may be the one holding it."""
    where = f"{host}:{port}"
    try:
        listen(host, port).close()
    except OSError as error:
        return _not_free(where, error, bind_advice(error, host))
    return Finding("port", f"{where} is free")


def _not_free(where: str, error: OSError, advice: str) -> Finding:
    if error.errno == errno.EADDRINUSE and not isinstance(error, socket.gaierror):
        return Finding(
            "port",
            f"{where} is in use now: fine if the service this check is for holds it; otherwise {advice}",
            "warning",
        )
    return Finding("port", f"cannot listen on {where}: {error.strerror or error}; {advice}", "problem")
