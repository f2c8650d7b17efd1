"""Behind a reverse proxy at a sub-path (nginx's `location /edge/`, Traefik's StripPrefix): the prefix the proxy
names in `X-Forwarded-Prefix` becomes the ASGI root path, so pages that build absolute addresses from it (the API
page at /docs, the OpenAPI document's server) point back through the proxy. The dashboard needs none of it: its
addresses are relative."""

from __future__ import annotations

import re

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

HEADER = "x-forwarded-prefix"
# A path of plain segments: the value goes into <script src> on the API page, so nothing that leaves this host
_PREFIX = re.compile(r"(/[A-Za-z0-9._~-]+)+")


class ForwardedPrefix:
    """Innermost of the middlewares (the token and Host checks see the path as sent): Starlette reads a root path
    as part of the path, so the prefix goes in front of it too, and routing takes it off again."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not scope.get("root_path"):
            prefix = Headers(scope=scope).get(HEADER, "").rstrip("/")
            if _PREFIX.fullmatch(prefix):
                raw = scope.get("raw_path") or scope["path"].encode()
                scope = {
                    **scope,
                    "root_path": prefix,
                    "path": prefix + scope["path"],
                    "raw_path": prefix.encode() + raw,
                }
        await self.app(scope, receive, send)
