"""Every failure a client can cause is a 4xx with a message; nothing echoes unbounded input or a traceback."""

from __future__ import annotations

import difflib
import logging
import sqlite3
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from edge_inference.edge.errors import EdgeError, counted
from edge_inference.edge.events.store import StoreBusy
from edge_inference.edge.secrets import mask_text

log = logging.getLogger("edge.service")
QUOTE_LIMIT = 64


def quoted(text: str, limit: int = QUOTE_LIMIT) -> str:
    """repr() of client input, cut to `limit` characters, for error messages."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({counted(len(text), 'character')})"


def _bounded(value: Any) -> Any:
    text = str(value)
    return value if len(text) <= QUOTE_LIMIT else text[:QUOTE_LIMIT] + f"... ({counted(len(text), 'character')})"


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {
            "loc": list(e.get("loc", ())),
            "msg": e.get("msg", ""),
            "type": e.get("type", "value_error"),  # required by the published ValidationError schema
            "input": _bounded(e.get("input")),
        }
        for e in exc.errors()[:10]
    ]
    return JSONResponse({"detail": errors}, status_code=422)


async def _user_error(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": mask_text(str(exc))}, status_code=400)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    detail = f"internal error ({type(exc).__name__}); it was logged on the server, please report it"
    return JSONResponse({"detail": detail}, status_code=500)


async def _http_error(request: Request, exc: Exception) -> Response:
    """The router's bare "Not Found" and "Method Not Allowed": said with the address or method that is there."""
    assert isinstance(exc, StarletteHTTPException)
    path = request.url.path
    if exc.status_code == 404 and exc.detail == "Not Found":
        sockets = getattr(request.app.state, "websocket_paths", [])
        if any(_filled(route, path) == "/" + path.strip("/") for route in sockets):
            address = request.url.replace(scheme="wss" if request.url.scheme == "https" else "ws", query="")
            detail = f"{quoted(path)} is a WebSocket: connect to {address} with a WebSocket client (websocat)"
            return JSONResponse({"detail": detail}, 426, headers={"Upgrade": "websocket", "Connection": "Upgrade"})
        near = nearest_routes(path, _route_paths(request.app))
        hint = f" (did you mean {' or '.join(near)}?)" if near else ""
        return JSONResponse({"detail": f"nothing at {quoted(path)}{hint}; the API is described at /docs"}, 404)
    if exc.status_code == 405 and exc.detail == "Method Not Allowed":
        allowed = (exc.headers or {}).get("Allow", "")
        here = request.url.replace(query="")  # its host has passed the Host check
        send = f": send an image, e.g. curl -F image=@photo.jpg {here}" if path.endswith("/detect") else ""
        detail = f"{quoted(path)} takes {allowed or 'another method'}, not {request.method}{send}"
        return JSONResponse({"detail": detail}, 405, headers=exc.headers)
    return await http_exception_handler(request, exc)


def _route_paths(app: FastAPI) -> list[str]:
    """The documented paths (FastAPI builds the document once) and the undocumented ones (/health/live, /metrics)."""
    own = [path for route in app.routes if isinstance(path := getattr(route, "path", None), str)]
    return list(app.openapi()["paths"]) + own


def nearest_routes(path: str, routes: list[str]) -> list[str]:
    """Routes a mistyped address may mean: those below it (`/health` -> /health/live, /health/ready), it under
    the API's prefix (`/streams` -> /api/v1/streams), or the closest spelling with its path parameters filled in
    (`/api/v1/stream/main` -> /api/v1/streams/main)."""
    path = "/" + path.strip("/")
    if len(path) > NEAR_LIMIT:
        return []
    below = [f for route in routes if (f := _filled(route, path, below=True)).startswith(path + "/")]
    if below:
        return list(dict.fromkeys(below))[:4]
    prefixed = [route for route in routes if route.endswith(path) and route.startswith("/api/")]
    if prefixed:
        return prefixed[:1]
    filled = [f for route in routes if (f := _filled(route, path))]
    return difflib.get_close_matches(path, filled, n=1, cutoff=0.85)


NEAR_LIMIT = 200  # longer addresses are no one's typo: no spelling comparison on them


def _filled(route: str, path: str, below: bool = False) -> str:
    """`/api/v1/streams/{stream_id}` given `/api/v1/stream/main`: `/api/v1/streams/main`, the path's segments in
    the template's parameters; `below`: a longer template too, filled as far as the path goes ("" if it cannot)."""
    template, given = route.strip("/").split("/"), path.strip("/").split("/")
    if "{" not in route and not below:
        return route
    if len(template) < len(given) or (len(template) > len(given) and not below):
        return ""
    filled = [g if t.startswith("{") else t for t, g in zip(template, given, strict=False)]
    rest = template[len(given) :]
    return "" if any(t.startswith("{") for t in rest) else "/" + "/".join(filled + rest)


def invalid(where: str, name: str, message: str, value: object) -> RequestValidationError:
    """A 422 in the same shape as FastAPI's own, for a value only the handler can judge (a cursor)."""
    return RequestValidationError([{"loc": (where, name), "msg": message, "type": "value_error", "input": value}])


async def _store_busy(request: Request, exc: Exception) -> JSONResponse:
    """A read of the events store that a stalled disk holds up: 503 at once, never a hang."""
    return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "10"})


async def _store_damaged(request: Request, exc: Exception) -> JSONResponse:
    """The events database damaged while serving: the recorder moves it aside and opens a fresh one."""
    log.warning("%s %s: the events database is damaged (%s)", request.method, request.url.path, exc)
    detail = f"the events database is damaged ({exc}); a fresh one is being opened: try again shortly"
    return JSONResponse({"detail": detail}, status_code=503, headers={"Retry-After": "5"})


def install(app: FastAPI) -> None:
    app.add_exception_handler(StoreBusy, _store_busy)
    app.add_exception_handler(sqlite3.DatabaseError, _store_damaged)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(EdgeError, _user_error)
    app.add_exception_handler(Exception, _unexpected)


__all__ = ["HTTPException", "install", "invalid", "quoted"]
