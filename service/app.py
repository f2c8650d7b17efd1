"""The FastAPI application: lifespan owns the streams, routes live in service.api."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from edge import __version__
from edge.config import ServiceConfig
from edge.settings import Settings
from edge.streams import StreamManager
from service import api
from service.metrics import ServiceMetrics
from service.uploads import UploadDetectors

API_PREFIX = "/api/v1"
STATIC = Path(__file__).parent / "static"


def dashboard() -> FileResponse:
    """The web dashboard: static files, no build step, nothing fetched from elsewhere."""
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


def create_app(config: ServiceConfig, settings: Settings | None = None) -> FastAPI:
    manager = StreamManager(config, settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        manager.start()  # models load in the background; /health/ready says when they are warm
        yield
        manager.stop()
        app.state.uploads.close()

    app = FastAPI(
        title="edge-inference",
        version=__version__,
        description="Real-time object detection: streams, detections, latency metrics.",
        lifespan=lifespan,
    )
    app.state.config = config
    app.state.manager = manager
    app.state.metrics = ServiceMetrics(manager)
    app.state.uploads = UploadDetectors(manager)
    app.include_router(api.router, prefix=API_PREFIX)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_api_route("/", dashboard, methods=["GET"], include_in_schema=False)
    # Conventional unversioned paths for Prometheus scrapers and container health checks.
    app.add_api_route("/metrics", api.metrics, methods=["GET"], include_in_schema=False)
    app.add_api_route("/health/live", api.live, methods=["GET"], include_in_schema=False)
    app.add_api_route("/health/ready", api.ready, methods=["GET"], include_in_schema=False)
    return app
