"""`edge` command line: one group, one module per sub-command."""

from __future__ import annotations

from edge.cli.app import main

__all__ = ["main"]
