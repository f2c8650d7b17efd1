"""Keep credentials in URLs out of every output: API, SSE, metrics, logs, errors, `edge bench` files.

URLs are parsed, not pattern-replaced: the password is everything between the first ':' of the user info and the
last '@' of the authority (so `admin:t@lk@host` masks `t@lk`, and `admin:p#ss@host`, whose '#' a URL parser takes
for the end of the address, masks `p#ss`), and query values are masked by their key
(password, pass, pw, pwd, token, key, secret, auth, sig and their compounds such as api_key or access_token).
Text that holds no URL with a secret is returned unchanged, byte for byte.
"""

from __future__ import annotations

import logging
import re

MASK = "***"
# A URL inside free text: scheme, '://', then anything up to whitespace, a quote or an angle bracket.
_URL_IN_TEXT = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>`]+")
_SECRET_WORDS = {
    "password", "passwd", "pass", "pw", "pwd", "passphrase", "token", "key", "secret", "auth", "authorization",
    "sig", "signature", "credential", "credentials", "session", "sessionid", "jwt", "otp",
    "apikey", "accesskey", "secretkey", "privatekey", "sessionkey", "authkey", "streamkey",
}  # fmt: skip
_SECRET_SUFFIXES = ("password", "passwd", "token", "secret", "signature")


def is_secret_key(key: str) -> bool:
    """`pw`, `api_key`, `accessToken`, `X-Amz-Signature` are secret; `keyframe`, `width`, `stream` are not."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key)
    words = [w for w in re.split(r"[^a-zA-Z0-9]+", spaced.lower()) if w]
    return any(w in _SECRET_WORDS or (w.endswith(_SECRET_SUFFIXES) and w != "keyframe") for w in words)


def _mask_query(query: str) -> str:
    def one(part: str) -> str:
        key, eq, _value = part.partition("=")
        return f"{key}={MASK}" if eq and is_secret_key(_unquote(key)) else part

    return "&".join(";".join(one(p) for p in chunk.split(";")) for chunk in query.split("&"))


def _unquote(text: str) -> str:
    from urllib.parse import unquote

    return unquote(text)


def _first_of(text: str, characters: str, start: int = 0) -> int:
    return min([i for i in (text.find(c, start) for c in characters) if i >= 0], default=len(text))


# What follows a user info's '@': an IPv4 address, a bracketed IPv6 one, or a name with a dot or a port
_HOST = re.compile(
    r"(?:(?:\d{1,3}\.){3}\d{1,3}|\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|[A-Za-z0-9-]+(?=:))(?::\d+)?"
)


def authority_end(rest: str) -> int:
    """Where the authority of `rest` (a URL after its '://') ends: at the first '/', '?' or '#', unless a password
    holds one of them unencoded (`admin:p#ss@cam/`, which FFmpeg cannot use either, yet it must never reach a log):
    then at the end of the host after the user info."""
    end = _first_of(rest, "/?#")
    authority = rest[:end]
    _user, colon, after = authority.partition(":")
    at = rest.find("@", end)
    if "@" in authority and at >= 0 and "/" not in rest[end:at]:
        return _first_of(rest, "/?#", at)  # `admin:p@ss#word@cam`: the '#' is the password's, as the last '@' says
    after_at = rest[at + 1 : _first_of(rest, "/?#", at + 1)]
    if "@" in authority and at >= 0 and "=" not in rest[end:at] and _HOST.fullmatch(after_at):
        # `admin:p@ss/word@192.168.1.5/live`: a host after the second '@' (not a query's `mail=a@b.com`)
        return _first_of(rest, "/?#", at)
    if "@" in authority or authority.startswith("[") or not colon or after.isdigit() or at < 0:
        return end  # a user info already, an IPv6 host, no password, a port, or no '@' after: as parsed
    return _first_of(rest, "/?#", at)


def unencoded_in_password(url: str) -> str:
    """The characters of `url`'s password that end the address unless percent-encoded ('', if none)."""
    _scheme, sep, rest = url.partition("://")
    userinfo = rest[: authority_end(rest)].rpartition("@")[0] if sep else ""
    return "".join(c for c in "/?#" if c in userinfo)


def password_encoding_advice(url: str) -> str:
    """What to write instead, when `url`'s password holds characters that end the address ('' if it holds none)."""
    from urllib.parse import quote

    found = unencoded_in_password(url)
    if not found:
        return ""
    codes = ", ".join(f"{c} as {quote(c, safe='')}" for c in found)
    return f"its password holds {' '.join(found)} as typed, which ends the address in a URL; write {codes}"


def mask_url(url: str) -> str:
    """`rtsp://admin:t@lk@cam/s?pw=1&fps=5` -> `rtsp://admin:***@cam/s?pw=***&fps=5`; other text as it is."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = authority_end(rest)
    authority, tail = rest[:end], rest[end:]
    userinfo, at, host = authority.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        if colon and password:
            authority = f"{user}:{MASK}@{host}"
        elif not colon and user:  # a key alone in the user info (`rtsp://KEY@host/`), as some cameras carry one
            authority = f"{MASK}@{host}"
    path, qmark, query = tail.partition("?")
    if qmark:
        query, hash_, fragment = query.partition("#")
        tail = f"{path}?{_mask_query(query)}{hash_}{fragment}"
    return f"{scheme}://{authority}{tail}"


# A query parameter in a bare path (an access log's `GET /ws?token=...`), a header in a dump of an ASGI scope
# (`(b'authorization', b'Bearer ...')`, `'cookie': '...'`), a bearer credential in free text.
_QUERY_PARAM = re.compile(r"(?<=[?&;])([A-Za-z0-9_.%-]+)=([^&;\s'\"<>`]*)")
_SECRET_HEADER = re.compile(
    r"(?i)([\'\"]?(?:authorization|proxy-authorization|cookie|set-cookie|x-api-key|x-auth-token|sec-websocket-protocol)"
    r"[\'\"]?\s*[,:=]\s*b?)"
    r"([\'\"])(.*?)(\2)"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}")
# A header dumped unquoted, as the websockets library's debug log writes a handshake: `< cookie: edge_token=...`
_HEADER_LINE = re.compile(
    r"(?im)^([<>]?\s*(?:authorization|proxy-authorization|cookie|set-cookie|x-api-key|x-auth-token"
    r"|sec-websocket-protocol)\s*:\s*)(\S.*)$"
)
SECRET_HEADER_WORDS = ("authorization", "cookie", "x-api-key", "x-auth-token", "sec-websocket-protocol")
_TOKEN_COOKIE = re.compile(r"\b(edge_token=)([^;\s'\"]+)")  # the service's own cookie, wherever it is written


def _mask_param(match: re.Match[str]) -> str:
    key, value = match.group(1), match.group(2)
    if value.startswith(MASK) or not is_secret_key(_unquote(key)):  # masked already (in a URL), or not a secret
        return match.group(0)
    return f"{key}={MASK}"


def mask_text(text: str) -> str:
    """Every URL inside a message, a log line or a traceback masked, and secret query values of bare paths, secret
    headers and bearer credentials; nothing else touched."""
    if "://" in text:

        def one(match: re.Match[str]) -> str:
            url = match.group(0)
            kept = url.rstrip(".,;:!)]}")  # sentence punctuation after a URL is not part of it
            return mask_url(kept) + url[len(kept) :]

        text = _URL_IN_TEXT.sub(one, text)
    if "=" in text and ("?" in text or "&" in text):
        text = _QUERY_PARAM.sub(_mask_param, text)
    lowered = text.lower()
    # a WebSocket client may carry its token as a subprotocol (browsers can set no other header on a WebSocket)
    if any(
        word in lowered for word in ("authorization", "cookie", "x-api-key", "x-auth-token", "sec-websocket-protocol")
    ):
        text = _SECRET_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}{m.group(4)}", text)
        text = _HEADER_LINE.sub(lambda m: f"{m.group(1)}{MASK}", text)
    if "edge_token=" in text:
        text = _TOKEN_COOKIE.sub(lambda m: f"{m.group(1)}{MASK}", text)
    if any(word in lowered for word in ("bearer", "basic", "token")):
        text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    return text


def mask_in(message: str, secret_source: str) -> str:
    """A library's message about `secret_source`: its URLs masked, and the source's own `user:password@` if a
    library echoed it without the scheme. The password alone is never replaced: it may be any common string."""
    message = mask_text(message.replace(secret_source, mask_url(secret_source)))
    _scheme, sep, rest = secret_source.partition("://")
    userinfo, at, _ = rest[: authority_end(rest)].rpartition("@") if sep else ("", "", "")
    if at and ":" in userinfo:
        user = userinfo.split(":", 1)[0]
        message = message.replace(f"{userinfo}@", f"{user}:{MASK}@")
    return message


class _MaskingRecordFactory:
    """Every log record of every logger (ours, uvicorn's, libraries') is masked once, when it is made."""

    def __init__(self, inner: logging._LogRecordFactory) -> None:  # type: ignore[name-defined]
        self.inner = inner

    def __call__(self, *args: object, **kwargs: object) -> logging.LogRecord:
        record = self.inner(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed log call keeps its own behaviour
            return record
        masked = mask_text(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = mask_text(logging.Formatter().formatException(record.exc_info))
        return record


def install_log_masking() -> None:
    """Idempotent: call once at start-up of every command that may log a URL."""
    factory = logging.getLogRecordFactory()
    if not isinstance(factory, _MaskingRecordFactory):
        logging.setLogRecordFactory(_MaskingRecordFactory(factory))
