"""`edge serve`: run streams and the HTTP API with uvicorn."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from edge.cli.app import cli
from edge.config import LOOPBACK, ServiceConfig, load_config, single_stream_config
from models.registry import DEFAULT_MODEL


def _urls(config: ServiceConfig) -> str:
    host = config.server.host
    shown = "localhost" if host in (LOOPBACK, "localhost", "::1") else host
    base = f"http://{shown}:{config.server.port}"
    lines = [f"edge: serving on {base}  (API docs {base}/docs)"]
    lines.append(f"  dashboard {base}/")
    for stream in config.streams:
        for stream_id in [f"{stream.id}-{item.split(':')[0]}" for item in stream.compare] or [stream.id]:
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
@click.option("--threads", type=click.IntRange(min=1))
@click.option("--conf", type=click.FloatRange(0, 1), default=0.25, show_default=True)
@click.option("--iou", type=click.FloatRange(0, 1), default=0.45, show_default=True)
@click.option("--id", "stream_id", default="main", show_default=True, help="Stream id in the API.")
@click.option(
    "--compare",
    help="Run the source through several backends at once, e.g. onnx,openvino,tflite "
    "(backend[:device]); the first is the agreement reference.",
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
@click.option("--host", default=None, help=f"Bind address [default: {LOOPBACK}]; other interfaces are your choice.")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="[default: 8080]")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info")
def serve(
    config_path: Path | None, source: str | None, host: str | None, port: int | None, log_level: str, **kwargs: Any
) -> None:
    """Run detection on live sources and serve detections, video and metrics over HTTP."""
    import uvicorn

    from service.app import create_app

    if config_path is not None:
        if source is not None:
            raise click.UsageError("give either --config or --source, not both")
        config = load_config(config_path)
        if host is not None or port is not None:
            chosen = config.server.model_copy(update={k: v for k, v in (("host", host), ("port", port)) if v})
            config = config.model_copy(update={"server": chosen})
    elif source is None:
        raise click.UsageError("give --source (e.g. --source 0 or --source video.mp4) or --config streams.yaml")
    else:
        compare = kwargs.pop("compare")
        stream = {"id": kwargs.pop("stream_id"), "source": source, **kwargs}
        if compare:
            stream["compare"] = [item.strip() for item in compare.split(",") if item.strip()]
        stream["pace"] = not stream.pop("no_pace")
        config = single_stream_config(stream, {k: v for k, v in (("host", host), ("port", port)) if v is not None})

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(config)  # checks every source and model name before anything starts
    if config.server.host not in (LOOPBACK, "localhost", "::1"):
        click.echo(
            f"note: listening on {config.server.host}: reachable from other machines, with no authentication", err=True
        )
    click.echo(_urls(config), err=True)
    uvicorn.run(app, host=config.server.host, port=config.server.port, log_level=log_level, access_log=False)
