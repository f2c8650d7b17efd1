"""Requests whose framing or target two readers could read two ways are refused (400) and their connection closed,
on either HTTP parser: two Host headers (one allowed, one not: which did the Host check see?), Content-Length beside
Transfer-Encoding (h11 read such a request and kept the connection open; a proxy in front may have read another
body), and a target that is not a path (an absolute-form URI naming another host than the Host header; httptools
served its path as if the Host header named it)."""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("edge.http")


def ambiguity(scope: Scope) -> str | None:
    """What makes this request ambiguous, in words; None for a plain one."""
    names = [name.lower() for name, _ in scope.get("headers", [])]
    if names.count(b"host") > 1:
        return "two Host headers"
    if b"content-length" in names and b"transfer-encoding" in names:
        return "both Content-Length and Transfer-Encoding"
    if not scope.get("path", "/").startswith("/"):
        return "a target that is not a path (an absolute URI)"
    return None


class FramingGuard:
    """Outermost of the middlewares: nothing else reads a request it refuses."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        why = ambiguity(scope) if scope["type"] == "http" else None
        if why is None:
            await self.app(scope, receive, send)
            return
        log.info("refused a request with %s", why)
        body = f"refused: a request with {why}\n".encode()
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 400, "headers": [*headers, (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
