"""Who may use the service: an API token, the Host header, and the Origin of browser requests.

- Token: with one set, every route but /health/live needs it, as `Authorization: Bearer <token>`, as the
  `edge_token` cookie, or as `?token=` (for what a browser cannot give a header: <img> MJPEG, EventSource,
  WebSocket, a VLC URL). Opening the dashboard with `?token=` swaps it for an HttpOnly, SameSite=Strict cookie and
  takes it out of the address bar.
- Listening beyond loopback without a token makes a random one (printed in the start-up URL, as Jupyter does),
  unless `allow_no_token` says an open service is what is wanted.
- Host: only the loopback names by default (a page that rebinds its DNS name to 127.0.0.1 is refused).
- Origin: a WebSocket or a state-changing request from a browser page of another origin is refused, so a web page
  cannot drive a service on the user's loopback; CORS stays off unless origins are configured.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from edge_inference.edge.config import MIN_TOKEN_LENGTH, ServerConfig
from edge_inference.edge.config.paths import with_path_meant
from edge_inference.edge.errors import EdgeError, counted
from edge_inference.edge.settings import Settings
from edge_inference.service.form_key import KEY_BYTES, ClientGone, read_form_key
from edge_inference.service.guesses import WrongTokens

log = logging.getLogger("edge.access")
COOKIE = "edge_token"
TOKEN_FILE_BYTES = 4096
LOOPBACK_NAMES = ["localhost", "127.0.0.1", "::1", "[::1]"]
OPEN_PATHS = {"/health/live"}
FORM_KEY_PATHS = ("/v1/vision/",)  # the token may come as the form's `api_key` instead (service/deepstack.py)
BODY_DEADLINE = "edge_body_deadline"
ASK_FOR_THE_KEY = (
    "this service needs its API token: send 'Authorization: Bearer <token>', or open the dashboard once with "
    "?token=<token>. The token is the one the service was given (server.token or token_file in its config, EDGE_TOKEN "
    "or EDGE_TOKEN_FILE), or, when none was given, the one edge serve made and printed at start-up"
)
DEFAULT_BODY_S = 30.0  # server.send_timeout_s's default
WRONG_FORM_KEY = "api_key is not this service's token (server.token, EDGE_TOKEN, or the one printed)"
MISSING_FORM_KEY = (
    f"this service needs its token: send it as the form's api_key, before the image (within its first "
    f"{KEY_BYTES // 1024} KiB, as deepstack-python does), or as 'Authorization: Bearer <token>'"
)
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
SIGN_IN_PAGE = """<!doctype html><meta charset="utf-8"><title>edge-inference: token needed</title>
<body style="font: 16px system-ui; margin: 2rem; max-width: 40rem">
<h1>This service needs its API token</h1>
<p>Open the dashboard address that <code>edge serve</code> printed when it started (it ends in
<code>?token=...</code>), or add <code>?token=&lt;your token&gt;</code> to this page's address.</p>
<p>The token is in the service's configuration (<code>server.token</code>, <code>token_file</code>) or in
<code>EDGE_TOKEN</code> / <code>EDGE_TOKEN_FILE</code>.</p></body>"""


def is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _read_token_file(path: Path) -> str:
    try:
        with path.expanduser().open("rb") as handle:
            raw = handle.read(TOKEN_FILE_BYTES + 1)  # `EDGE_TOKEN_FILE=/dev/zero` was read until memory ran out
        if len(raw) > TOKEN_FILE_BYTES:
            raise EdgeError(f"the token file {path} is longer than {TOKEN_FILE_BYTES} bytes: it holds one token")
        # utf-8-sig: a byte-order mark from a Windows editor would be part of the token, and no client would match it
        token = raw.decode("utf-8-sig").strip()
    except FileNotFoundError:
        raise EdgeError(with_path_meant(f"there is no token file {path}", path)) from None
    except OSError as exc:
        raise EdgeError(f"cannot read the token file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise EdgeError(
            f"the token file {path} is not UTF-8 text: write the token in ASCII letters and digits"
        ) from None
    if not token:
        raise EdgeError(f"the token file {path} is empty")
    return token


def _given_token(server: ServerConfig, settings: Settings) -> str | None:
    """The token, from the first of: the config's token, its token_file, EDGE_TOKEN, EDGE_TOKEN_FILE.
    Spaces around it are dropped (an HTTP header's value loses them on the way, so such a token never matched), and
    one from any place is held to the config's minimum length (EDGE_TOKEN=abc was taken as it was)."""
    if server.token is not None:
        token, source = server.token.get_secret_value(), "server.token"
    elif server.token_file is not None:
        token, source = _read_token_file(server.token_file), f"the token file {server.token_file}"
    elif settings.token is not None:
        token, source = settings.token.get_secret_value(), "EDGE_TOKEN"
    elif settings.token_file is not None:
        token, source = _read_token_file(settings.token_file), f"the token file {settings.token_file} (EDGE_TOKEN_FILE)"
    else:
        return None
    token = token.strip()
    unsendable = sorted({c for c in token if not (c.isascii() and c.isprintable())})
    if unsendable:
        shown = ", ".join(repr(c) for c in unsendable[:5])
        raise EdgeError(
            f"the token from {source} holds {shown}, which no HTTP header can carry (nor most clients type): give "
            "one of ASCII letters, digits and punctuation (make one with: python3 -c 'import secrets; "
            "print(secrets.token_urlsafe(24))')"
        )
    if len(token) < MIN_TOKEN_LENGTH:
        raise EdgeError(
            f"the token from {source} has {counted(len(token), 'character')}; give one of at least "
            f"{MIN_TOKEN_LENGTH} (make one "
            "with: python3 -c 'import secrets; print(secrets.token_urlsafe(24))')"
        )
    return token


@dataclass(frozen=True)
class AccessPolicy:
    token: str | None = field(default=None, repr=False)
    generated: bool = False  # made at start-up because nothing was configured for a non-loopback address
    metrics_public: bool = False
    allowed_hosts: tuple[str, ...] = ("*",)
    cors_origins: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, server: ServerConfig, settings: Settings) -> AccessPolicy:
        token = _given_token(server, settings)
        generated = False
        if token is None and not is_loopback(server.host) and not server.allow_no_token:
            token, generated = secrets.token_urlsafe(24), True
        hosts = server.allowed_hosts
        if hosts is None:
            hosts = LOOPBACK_NAMES if is_loopback(server.host) else ["*"]
        return cls(token, generated, server.metrics_public, tuple(hosts), tuple(server.cors_origins))

    def accepts(self, candidate: str | None) -> bool:
        if self.token is None:
            return True
        return candidate is not None and hmac.compare_digest(candidate.encode(), self.token.encode())

    def needs_token(self, path: str) -> bool:
        if self.token is None or path in OPEN_PATHS:
            return False
        return not (self.metrics_public and path in ("/metrics", "/api/v1/metrics"))


def _key_in_the_form(scope: Scope, websocket: bool) -> bool:
    """DeepStack's clients (Blue Iris, Home Assistant's deepstack_object) send the key as the form's `api_key`."""
    return not websocket and scope["path"].startswith(FORM_KEY_PATHS) and scope.get("method") == "POST"


def body_deadline(scope: Scope) -> float:
    """When the request's body must have come, on the event loop's clock: one clock from its first byte (the
    header's end), for every read of it, whatever waits between (the upload gate)."""
    return float(scope.get("state", {}).get(BODY_DEADLINE, asyncio.get_running_loop().time() + DEFAULT_BODY_S))


def _origin_allowed(origin: str, headers: Headers, policy: AccessPolicy) -> bool:
    if origin in policy.cors_origins or "*" in policy.cors_origins:
        return True
    parts = urlsplit(origin)
    return bool(parts.netloc) and parts.netloc == headers.get("host")  # same origin


def deepstack_failure(status: int, error: str) -> dict[str, object]:
    """A refusal in DeepStack's own shape, which its clients read (`success`, `error`)."""
    return {"success": False, "error": error, "code": status}


async def _respond(send: Send, status: int, body: dict[str, object], headers: list[tuple[bytes, bytes]]) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class AccessMiddleware:
    def __init__(self, app: ASGIApp, policy: AccessPolicy, body_s: float = DEFAULT_BODY_S) -> None:
        self.app = app
        self.policy = policy
        self.body_s = body_s
        self.guesses = WrongTokens()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http":  # the body's one clock starts now, with its first byte
            scope.setdefault("state", {})[BODY_DEADLINE] = asyncio.get_running_loop().time() + self.body_s
        headers = Headers(scope=scope)
        websocket = scope["type"] == "websocket"
        origin = headers.get("origin")
        unsafe = websocket or scope.get("method") not in SAFE_METHODS
        if origin and unsafe and not _origin_allowed(origin, headers, self.policy):
            await self._refuse(scope, send, 403, "cross-origin request refused (Origin is not this service)")
            return
        if self.policy.needs_token(scope["path"]):
            await self._with_token(scope, receive, send, headers)
            return
        await self.app(scope, receive, send)

    async def _with_token(self, scope: Scope, receive: Receive, send: Send, headers: Headers) -> None:
        """The request on, where it carries the token; else the form's key read, or a refusal."""
        websocket = scope["type"] == "websocket"
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        given = query.get("token")
        if given is not None and self.policy.accepts(given) and not websocket and scope["path"] == "/":
            await self._swap_for_cookie(scope, send, given, query)
            return
        candidates = [c for c in self._candidates(headers, given) if c is not None]
        if any(self.policy.accepts(c) for c in candidates):
            await self.app(scope, receive, send)
            return
        if _key_in_the_form(scope, websocket):
            await self._with_form_key(scope, receive, send, headers)
            return
        if candidates:  # a token was given, and it is not this one: guessing is slowed and said
            await self.guesses.refused(scope)
        await self._refuse(scope, send, 401, ASK_FOR_THE_KEY)

    async def _with_form_key(self, scope: Scope, receive: Receive, send: Send, headers: Headers) -> None:
        """The form's `api_key`, read before anything else is done for the request (`form_key.py`)."""
        try:
            found = await read_form_key(receive, headers.get("content-type", ""), body_deadline(scope))
        except ClientGone:
            log.debug("%s: the client went away before its form's key came", scope["path"])
            return
        if found.timed_out:
            await _respond(send, 408, deepstack_failure(408, "the form's api_key did not arrive in time"), [])
            return
        if not self.policy.accepts(found.key):
            if found.key is not None:
                await self.guesses.refused(scope)
            why = WRONG_FORM_KEY if found.key is not None else MISSING_FORM_KEY
            await _respond(send, 401, deepstack_failure(401, why), [(b"www-authenticate", b'Bearer realm="edge"')])
            return
        await self.app(scope, found.replaying(receive), send)

    @staticmethod
    def _candidates(headers: Headers, query_token: str | None) -> list[str | None]:
        auth = headers.get("authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        cookies = dict(part.strip().split("=", 1) for part in headers.get("cookie", "").split(";") if "=" in part)
        return [bearer, cookies.get(COOKIE), query_token]

    async def _swap_for_cookie(self, scope: Scope, send: Send, token: str, query: dict[str, str]) -> None:
        """The dashboard URL with ?token=: set the cookie and send the browser to the same page without it."""
        rest = urlencode({k: v for k, v in query.items() if k != "token"})
        # relative: behind a reverse proxy at a sub-path (https://home/edge/?token=...) the browser stays there
        location = "./" + (f"?{rest}" if rest else "")
        cookie = f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
        headers = [(b"location", location.encode()), (b"set-cookie", cookie.encode()), (b"cache-control", b"no-store")]
        await _respond(send, 303, {"detail": "signed in"}, headers)

    @staticmethod
    async def _refuse(scope: Scope, send: Send, status: int, message: str) -> None:
        if scope["type"] == "websocket":
            # Closing before accepting answers the handshake with HTTP 403; the reason is in the server log only.
            await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
            return
        headers = [(b"www-authenticate", b'Bearer realm="edge"')] if status == 401 else []
        if status == 401 and scope["path"] == "/":  # a person opening the dashboard: a page, not JSON
            page = SIGN_IN_PAGE.encode()
            headers += [(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(page)).encode())]
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": page})
            return
        await _respond(send, status, {"detail": message}, headers)
