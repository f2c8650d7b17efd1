"""`edge` command line: one group (app.py), one module per sub-command, imported when its command runs (importing
registers it).

The composition root of the program: it may import the service, the runtime and everything under them; nothing
imports it.
"""

from __future__ import annotations

import sys


def main() -> None:
    try:  # Ctrl-C in the second it takes to import (a Pi's SD card) printed a 30-line traceback: the exit code alone
        from edge_inference.cli.app import cli
        from edge_inference.edge.secrets import install_log_masking

        install_log_masking()  # no log line of any library shows a password from a URL
        cli.main(standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(130)


__all__ = ["main"]
