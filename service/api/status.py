"""Routes of the service's state: engines, figures, Prometheus metrics, liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from edge_inference.edge.runtime.health import is_live, service_health
from edge_inference.edge.runtime.snapshots import (
    ServiceStats,
    service_stats,
)
from edge_inference.edge.tools.backends_report import BackendReport, backends_report
from edge_inference.service.api.common import (
    manager_of,
    media,
)
from edge_inference.service.schemas import Health

router = APIRouter()


@router.get(
    "/backends",
    response_model=list[BackendReport],
    summary="Inference engines, devices found, and the registry models each can run",
)
def backends() -> list[BackendReport]:
    return backends_report()


@router.get("/stats", response_model=ServiceStats, summary="Per-stream and per-backend figures")
def stats(request: Request) -> ServiceStats:
    return service_stats(manager_of(request))


@router.get(
    "/metrics",
    summary="Prometheus exposition",
    response_class=Response,
    responses=media("text/plain; version=0.0.4", "Prometheus text format"),
)
def metrics(request: Request) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(request.app.state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


@router.head("/health/live", include_in_schema=False)  # load balancers that probe with HEAD: not a 405
@router.get("/health/live", response_model=Health, summary="The process is sound", responses={503: {}})
async def live(request: Request) -> JSONResponse:
    """200 while the event loop answers and every stream's threads are alive (or being restarted). On the event loop
    itself, never queued behind the worker threads other routes wait for: a probe is answered ahead of them."""
    alive = is_live(manager_of(request))
    body = Health(status="alive" if alive else "unsound", streams={})
    return JSONResponse(body.model_dump(), status_code=200 if alive else 503)


@router.head("/health/ready", include_in_schema=False)
@router.get(
    "/health/ready",
    response_model=Health,
    summary="Can the service do its job: ok, degraded (200 unless strict_ready), starting or down (503)",
    responses={503: {"model": Health}},
)
async def ready(request: Request) -> JSONResponse:
    """As `live`, on the event loop: the figures it reads are in memory, nothing waits."""
    health = service_health(manager_of(request), request.app.state.config.server.strict_ready)
    body = Health(status=health.status, strict=health.strict, streams=health.streams, problems=health.problems)
    return JSONResponse(body.model_dump(), status_code=200 if health.ready else 503)
