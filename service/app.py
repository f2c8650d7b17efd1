"""The FastAPI application: lifespan owns the streams, routes live in service.api (a module per resource)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI
from fastapi.responses import FileResponse
from fastapi.routing import APIRoute, APIWebSocketRoute
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware

from edge_inference import __version__
from edge_inference.edge.config import ServiceConfig
from edge_inference.edge.runtime.streams import StreamManager
from edge_inference.edge.settings import Settings, get_settings
from edge_inference.service import api, deepstack, errors
from edge_inference.service.access import AccessMiddleware, AccessPolicy
from edge_inference.service.api import status
from edge_inference.service.encodings import EncodingCache
from edge_inference.service.flush_clock import FlushClock
from edge_inference.service.framing import FramingGuard
from edge_inference.service.limits import ClientSlots, UploadGate
from edge_inference.service.metrics import ServiceMetrics
from edge_inference.service.proxy import ForwardedPrefix
from edge_inference.service.query_names import check_query_names
from edge_inference.service.uploads import UploadDetectors

API_PREFIX = "/api/v1"
STATIC = Path(__file__).parent / "static"


def dashboard() -> FileResponse:
    """The web dashboard: static files, no build step, nothing fetched from elsewhere."""
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


def favicon() -> FileResponse:
    return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


def create_app(config: ServiceConfig, settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    access = AccessPolicy.from_config(config.server, settings)  # reads token files: fails before anything starts
    manager = StreamManager(config, settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.shutdown = asyncio.Event()
        manager.start()  # models load in the background; /health/ready says when they are warm
        yield
        app.state.shutdown.set()
        await asyncio.to_thread(manager.stop)
        app.state.uploads.close()

    # /docs and /redoc from bundled assets (fastapi-offline): they work on a device with no internet
    app = FastAPIOffline(
        favicon_url="favicon.ico",  # relative, as the dashboard's addresses: behind a proxy's sub-path too
        title="edge-inference",
        version=__version__,
        description="Real-time object detection: streams, detections, latency metrics.",
        lifespan=lifespan,
        dependencies=[Depends(check_query_names)],  # `?hieght=`, Frigate's `?h=`: a 422 naming the parameter meant
    )
    app.state.config = config
    app.state.access = access
    app.state.manager = manager
    app.state.uploads = UploadDetectors(manager)
    app.state.upload_gate = UploadGate(config.server.upload_workers, config.server.upload_queue)
    app.state.metrics = ServiceMetrics(manager, app.state.upload_gate, config.server.strict_ready)
    app.state.client_slots = ClientSlots(config.server.max_clients_per_stream)
    app.state.encodings = EncodingCache()
    app.state.flush_clock = FlushClock(1.0 / config.server.client_flush_hz)  # streaming clients' writes
    app.state.websockets = 0  # open WebSockets: shutdown lets them close with 1001 before uvicorn's 1012
    app.state.shutdown = asyncio.Event()  # replaced in the lifespan, on the serving loop
    errors.install(app)
    # Outermost last: ambiguous framing refused, Host check, then Origin and token, then CORS when configured, then a
    # proxy's sub-path.
    # (Slow clients: server.py.)
    app.add_middleware(ForwardedPrefix)
    if config.server.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=config.server.cors_origins,
            allow_headers=["Authorization", "Content-Type"],
            allow_methods=["GET", "POST"],
        )
    app.add_middleware(AccessMiddleware, policy=access, body_s=config.server.send_timeout_s)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(access.allowed_hosts), www_redirect=False)
    app.add_middleware(FramingGuard)  # outermost: an ambiguous request reaches nothing (framing.py)
    app.state.websocket_paths = []  # a plain GET there is answered with how to connect, not "nothing at" (errors.py)
    for router in api.ROUTERS:
        _declare_unknown_streams(router)
        app.include_router(router, prefix=API_PREFIX)
        app.state.websocket_paths += [API_PREFIX + r.path for r in router.routes if isinstance(r, APIWebSocketRoute)]
    app.include_router(deepstack.router)  # at DeepStack's own addresses, which its clients build themselves
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_api_route("/", dashboard, methods=["GET"], include_in_schema=False)
    app.add_api_route("/favicon.ico", favicon, methods=["GET"], include_in_schema=False)
    # Conventional unversioned paths for Prometheus scrapers and container health checks.
    app.add_api_route("/metrics", status.metrics, methods=["GET"], include_in_schema=False)
    # HEAD too: some load balancers probe with it, and a 405 reads as down
    app.add_api_route("/health/live", status.live, methods=["GET", "HEAD"], include_in_schema=False)
    app.add_api_route("/health/ready", status.ready, methods=["GET", "HEAD"], include_in_schema=False)
    return app


def _declare_unknown_streams(router: APIRouter) -> None:
    """Every route with a stream id in its path answers 404 for an id that is not configured: say so in OpenAPI."""
    for route in router.routes:
        if isinstance(route, APIRoute) and "{stream_id}" in route.path:
            route.responses.setdefault(404, {"description": "no such stream; the message lists the streams"})
