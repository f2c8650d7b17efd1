"""Every failure a client can cause is a 4xx with a message; nothing echoes unbounded input or a traceback."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from edge_inference.edge.errors import EdgeError
from edge_inference.edge.secrets import mask_text

log = logging.getLogger("edge.service")
QUOTE_LIMIT = 64


def quoted(text: str, limit: int = QUOTE_LIMIT) -> str:
    """repr() of client input, cut to `limit` characters, for error messages."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


def _bounded(value: Any) -> Any:
    text = str(value)
    return value if len(text) <= QUOTE_LIMIT else text[:QUOTE_LIMIT] + f"... ({len(text)} characters)"


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


def invalid(where: str, name: str, message: str, value: object) -> RequestValidationError:
    """A 422 in the same shape as FastAPI's own, for a value only the handler can judge (a cursor)."""
    return RequestValidationError([{"loc": (where, name), "msg": message, "type": "value_error", "input": value}])


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(EdgeError, _user_error)
    app.add_exception_handler(Exception, _unexpected)


__all__ = ["HTTPException", "install", "invalid", "quoted"]
