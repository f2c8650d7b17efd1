"""The `edge` group and the one place that turns user-facing failures into a single line."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, NoReturn

import click

import edge_inference
from edge_inference.backends import BackendError
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.secrets import mask_text
from edge_inference.edge.settings import misspelled_variables
from edge_inference.models.errors import ModelError

USER_ERRORS = (EdgeError, ModelError, BackendError)


class UserError(click.ClickException):
    """Printed as one `error: ...` line with exit status 1, never a traceback."""

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def _reader_gone() -> NoReturn:
    """`edge detect clip.mp4 --json | head -1`: the reader has what it wanted and closed the pipe; stop without a
    word, as other programs do (Python's advice: point stdout at /dev/null so the flush at exit does not fail)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(1)


# Each sub-command's module, imported when that command runs (importing registers it): every module at start cost
# 2.2 s of imports before `edge serve` could say a config was not valid YAML (the service, FastAPI, every engine's
# options), and that much again on a Pi's every `edge detect`.
COMMAND_MODULES = {
    "backends": "backends_cmd",
    "bench": "bench_cmd",
    "detect": "detect",
    "doctor": "doctor_cmd",
    "models": "models_cmd",
    "serve": "serve",
}


class FriendlyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | COMMAND_MODULES.keys())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMAND_MODULES and cmd_name not in self.commands:
            importlib.import_module(f"edge_inference.cli.{COMMAND_MODULES[cmd_name]}")
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except USER_ERRORS as exc:
            raise UserError(mask_text(str(exc))) from None
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except BrokenPipeError:
            _reader_gone()
        except Exception as exc:
            if os.environ.get("EDGE_DEBUG"):
                raise
            raise UserError(
                mask_text(f"unexpected {type(exc).__name__}: {exc} (set EDGE_DEBUG=1 for the traceback and report it)")
            ) from None


def _show_version(ctx: click.Context, _param: click.Parameter, asked: bool) -> None:
    """The installed version, looked up only when asked (importlib.metadata is slow to import)."""
    if asked and not ctx.resilient_parsing:
        click.echo(f"edge, version {edge_inference.__version__}")
        ctx.exit()


@click.group(cls=FriendlyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_show_version,
    help="Show the version and exit.",
)
def cli() -> None:
    """Real-time object detection on edge devices: detect, serve, compare backends."""
    for line in misspelled_variables(os.environ):  # every command reads some EDGE_* (a model mirror, a cache)
        click.echo(f"note: {line}", err=True)
