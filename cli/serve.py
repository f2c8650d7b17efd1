"""`edge serve`: run streams and the HTTP API with uvicorn."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from edge_inference.cli.app import cli
from edge_inference.cli.listening import bind, shown_hosts
from edge_inference.cli.options import FRACTION, classes_flag, engine_option_flag, labels_flag
from edge_inference.edge.config import (
    LOOPBACK,
    MAX_THREADS,
    ServiceConfig,
    compare_member_ids,
    load_config,
    single_stream_config,
)
from edge_inference.edge.settings import Settings, get_settings
from edge_inference.models.registry import DEFAULT_MODEL


def _urls(config: ServiceConfig, port: int, generated_token: str | None, has_token: bool) -> str:
    shown, *others = shown_hosts(config.server.host)
    base = f"http://{shown}:{port}"
    lines = [f"edge: serving on {base}  (API docs {base}/docs)"]
    if others:
        lines.append(f"  also at {', '.join(f'http://{host}:{port}' for host in others)}")
    if generated_token:
        lines.append(f"  dashboard {base}/?token={generated_token}")
        lines.append(
            "  (a token was made for this run because the service listens beyond loopback: give it to clients as "
            "'Authorization: Bearer <token>'; set server.token or EDGE_TOKEN to keep one)"
        )
    elif has_token:  # the user's own token is theirs to paste: never printed
        lines.append(f"  dashboard {base}/?token=<your token: server.token, token_file, EDGE_TOKEN or EDGE_TOKEN_FILE>")
    else:
        lines.append(f"  dashboard {base}/")
    for stream in config.streams:
        for stream_id in compare_member_ids(stream.id, stream.compare) or [stream.id]:
            api = f"{base}/api/v1/streams/{stream_id}"
            lines.append(f"  stream {stream_id}: video {api}/video.mjpg  events {api}/events")
        if stream.compare:
            lines.append(f"  comparison of {', '.join(stream.compare)}: {base}/api/v1/compare")
    lines.append(f"  metrics {base}/metrics  stats {base}/api/v1/stats  ready {base}/health/ready")
    return "\n".join(lines)


@cli.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="YAML file with several streams.")
@click.option("--source", "-s", help="Camera index, /dev/videoN, video file, RTSP/HTTP URL, image, folder or glob.")
@click.option("--model", "-m", default=DEFAULT_MODEL, show_default=True, help="Registry name or model file.")
@click.option("--backend", "-b", default="auto", show_default=True)
@click.option("--device", "-d", default="auto", show_default=True)
@click.option("--fallback", is_flag=True, help="Run on the CPU if the device is unavailable, and say so.")
@click.option("--threads", type=click.IntRange(min=1, max=MAX_THREADS))
@labels_flag()
@engine_option_flag()
@click.option("--conf", type=FRACTION, default=0.25, show_default=True)
@click.option("--iou", type=FRACTION, default=0.45, show_default=True)
@classes_flag()
@click.option("--id", "stream_id", default="main", show_default=True, help="Stream id in the API.")
@click.option(
    "--compare",
    help="Run the source through several backends at once, e.g. onnx,openvino,tflite "
    "(backend[:device][@model]: onnx@yolox-nano-int8 runs another model on the same frames; or a model on a server: "
    "triton+grpc://HOST:PORT/NAME); the first is the agreement reference.",
)
@click.option(
    "--mode",
    type=click.Choice(["auto", "live", "file"]),
    default="auto",
    show_default=True,
    help="live: newest frame only; file: every frame in order.",
)
@click.option("--loop", is_flag=True, help="File sources: start again at the end.")
@click.option("--no-pace", is_flag=True, help="File sources: as fast as the backend allows, not at the file's fps.")
@click.option(
    "--motion",
    is_flag=True,
    help="Run the detector only on frames where something moved (still scenes cost almost nothing).",
)
@click.option(
    "--ffmpeg",
    "ffmpeg_hwaccel",
    metavar="PRESET",
    help="Decode with the ffmpeg program: 'software', or a hardware preset (preset-rpi-64-h264, preset-vaapi, "
    "preset-intel-qsv-h264, preset-nvidia, ...); frames are scaled in FFmpeg to --width.",
)
@click.option("--width", type=click.IntRange(min=16), help="Frame width (cameras: asked for; --ffmpeg: scaled to).")
@click.option("--host", default=None, help=f"Bind address [default: {LOOPBACK}]; other interfaces are your choice.")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="[default: 8080]")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info")
@click.option(
    "--exit-at-end",
    is_flag=True,
    help="Stop the service once every source has ended (files played to their end, without --loop): for scripts.",
)
@click.option(
    "--check",
    is_flag=True,
    help="Do not serve: open each source once, load each engine and run it on that frame, ask the broker, look at "
    "the data folder and the port, then exit (1 if something would stop the service). A service running on the "
    "same config is left alone.",
)
def serve(
    config_path: Path | None,
    source: str | None,
    host: str | None,
    port: int | None,
    log_level: str,
    check: bool,
    exit_at_end: bool,
    **kwargs: Any,
) -> None:
    """Run detection on live sources and serve detections, video and metrics over HTTP."""
    settings = get_settings()
    if config_path is None and source is None:
        config_path = settings.config  # EDGE_CONFIG; --source or --config given on the command line win
    server = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
    config = with_environment(_config(config_path, source, server, kwargs), settings, flags=server.keys())
    level = max(logging.WARNING, logging.getLevelName(log_level.upper())) if check else log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.captureWarnings(True)  # numpy's overflow warnings and the like: log lines (time, level, masked), not raw
    for line in config.notes:
        click.echo(f"note: {line}", err=True)
    if check:
        from edge_inference.cli.serve_check import report  # engines, events: loaded for the check alone

        raise SystemExit(report(config, settings))
    from edge_inference.edge.detection.auto.choice import lines_to_log

    lines_to_log()  # `--backend auto`'s lines, as the service's others: with time and level
    # the service (FastAPI, the runtime) after the config is read: a mistake in it is said without waiting for them
    from edge_inference.service.access import is_loopback
    from edge_inference.service.app import create_app
    from edge_inference.service.server import make_server

    # the port first: in use, it was said only once every model had been resolved (40 s with `auto` on a Pi)
    listener = bind(config.server.host, config.server.port)
    app = create_app(config)  # checks every source, model name and token file before anything starts
    uvicorn_server = make_server(app, config, log_level)  # a parser asked for and not installed: said before the URLs
    access = app.state.access
    if access.token is None and not is_loopback(config.server.host):
        click.echo(
            f"note: listening on {config.server.host} with no token (allow_no_token): anyone who reaches this "
            "machine can use the service",
            err=True,
        )
    generated = access.token if access.generated else None
    click.echo(_urls(config, listener.getsockname()[1], generated, access.token is not None), err=True)
    if exit_at_end:
        from edge_inference.cli.ending import stop_when_every_source_ended

        stop_when_every_source_ended(app.state.manager, uvicorn_server)
    uvicorn_server.run(sockets=[listener])


def with_environment(config: ServiceConfig, settings: Settings, flags: Iterable[str] = ()) -> ServiceConfig:
    """EDGE_HOST / EDGE_PORT where neither a flag nor the config file set the address (flags and file win)."""
    given = config.server.model_fields_set | set(flags)
    env = {k: v for k, v in (("host", settings.host), ("port", settings.port)) if v is not None and k not in given}
    return config.model_copy(update={"server": config.server.model_copy(update=env)}) if env else config


def _config(
    config_path: Path | None, source: str | None, server: dict[str, Any], flags: dict[str, Any]
) -> ServiceConfig:
    """From --config (with --host/--port on top) or from --source and the stream flags."""
    if config_path is not None:
        if source is not None:
            raise click.UsageError("give either --config or --source, not both")
        config = load_config(config_path)
        return config.model_copy(update={"server": config.server.model_copy(update=server)}) if server else config
    if source is None:
        raise click.UsageError(
            "give --source (e.g. --source 0 or --source video.mp4) or --config streams.yaml (or set EDGE_CONFIG)"
        )
    compare = flags.pop("compare")
    stream = {"id": flags.pop("stream_id"), "source": source, **flags}
    if compare:
        stream["compare"] = [item.strip() for item in compare.split(",") if item.strip()]
    stream["pace"] = not stream.pop("no_pace")
    if engine_options := stream.pop("engine_option", None):
        stream["engine_options"] = engine_options
    if stream.pop("motion"):
        stream["motion"] = {}
    if hwaccel := stream.pop("ffmpeg_hwaccel", None):
        stream["ffmpeg"] = {"hwaccel": None if hwaccel == "software" else hwaccel}
    return single_stream_config(stream, server)
