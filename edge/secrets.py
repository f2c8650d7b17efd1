"""Keep credentials in stream URLs out of logs, stats and API responses."""

from __future__ import annotations

import re
import urllib.parse

_SECRET_QUERY_KEYS = re.compile(r"(pass(word)?|pwd|token|key|secret|auth|signature|sig)", re.IGNORECASE)
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<password>[^@/\s]*)@")


def mask_url(text: str) -> str:
    """`rtsp://admin:hunter2@cam/stream?token=abc` -> `rtsp://admin:***@cam/stream?token=***`."""
    if "://" not in text:
        return text
    masked = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
    parts = urllib.parse.urlsplit(masked)
    if not parts.query:
        return masked
    query = [(k, "***" if _SECRET_QUERY_KEYS.search(k) else v) for k, v in urllib.parse.parse_qsl(parts.query, True)]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query, safe="*")))


def mask_in(message: str, secret_source: str) -> str:
    """Replace a source URL (and its password alone) wherever a library echoed it into a message."""
    masked = mask_url(secret_source)
    message = message.replace(secret_source, masked)
    match = _USERINFO.search(secret_source)
    if match and match["password"]:
        message = message.replace(match["password"], "***")
    return message
