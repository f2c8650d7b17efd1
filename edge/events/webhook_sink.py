"""Event changes POSTed as JSON to the configured URLs, through the outbox (retried until a 2xx): the `webhook`
sink, `webhooks: [{url: ...}]` or `sinks: [{type: webhook, url: ...}]`.

A 4xx other than 408 and 429 says the receiver will never take this message (a schema it refuses, a wrong path):
retrying it would block every later event at the head of the queue, so it is counted as rejected, logged once per
kind of answer, and the next message goes.
"""

from __future__ import annotations

import logging
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from urllib.parse import urlsplit

from edge_inference.edge.config import WebhookConfig
from edge_inference.edge.errors import connection_failure
from edge_inference.edge.events.sink import SinkKind
from edge_inference.edge.events.storage import Level
from edge_inference.edge.events.store import Message

log = logging.getLogger("edge.webhooks")
RETRYABLE_4XX = (408, 429)  # request timeout, too many requests: the receiver asks to try again
CHECK_TIMEOUT_S = 5.0


def shown_address(index: int, url: str) -> str:
    """`webhook 0 (http://ha.local:8123/…)`: the receiver's host, never its path or query. There the secret often is:
    a Home Assistant webhook id, which anyone who knows it can trigger (HA: treat it like a password), a Slack or
    Discord token, an ntfy topic."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    host = f"[{host}]" if ":" in host else host
    port = f":{parts.port}" if _has_port(parts.netloc) else ""
    rest = "/…" if parts.path.strip("/") or parts.query else ""
    return f"webhook {index} ({parts.scheme}://{host}{port}{rest})"


def _has_port(netloc: str) -> bool:
    return netloc.rpartition("@")[2].rpartition("]")[2].rpartition(":")[2].isdigit()


class Webhook:
    topic = "event"

    def __init__(self, index: int, config: WebhookConfig) -> None:
        self.sink = f"webhook:{index}"
        self.name = f"webhook {index}"
        self.url = config.url.get_secret_value()
        self.shown = shown_address(index, self.url)
        self.timeout_s = config.timeout_s
        self.last_error: str | None = None
        self.failing = False  # the last message could not be delivered and waits for the next try
        self.rejected = 0  # messages the receiver refused for good (4xx), dropped from the outbox

    @property
    def problem(self) -> str | None:
        return self.last_error if self.failing else None

    def when_back(self, wake: Callable[[], None]) -> None:
        """A receiver does not say when it is back: the outbox tries again after its backoff."""

    def check(self) -> tuple[str, Level]:
        """Whether its host takes a connection (nothing is POSTed: a receiver may act on any message)."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            socket.create_connection((host, port), timeout=CHECK_TIMEOUT_S).close()
        except ValueError:
            return f"{host}: its port is not a number", "problem"
        except OSError as exc:
            why = connection_failure(exc, host, port, CHECK_TIMEOUT_S, "the receiver runs")
            return f"{why}; events would wait in the outbox", "warning"
        return f"{host}:{port} answers", "ok"

    def deliver(self, messages: list[Message]) -> int:
        """How many messages, from the first, are done with: delivered (2xx) or rejected for good (4xx)."""
        for done, message in enumerate(messages):
            request = urllib.request.Request(  # noqa: S310 - http(s) only, checked in the config
                self.url, data=message.payload, method="POST", headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310
                    response.read()
            except urllib.error.HTTPError as exc:
                if 400 <= exc.code < 500 and exc.code not in RETRYABLE_4XX:
                    self.rejected += 1
                    self._say(f"rejected an event ({exc.code} {exc.reason}); counted and skipped")
                    continue
                return self._failed(done, f"answered {exc.code} {exc.reason}")
            except (urllib.error.URLError, OSError, ValueError) as exc:
                return self._failed(done, self._unreachable(exc))
            self.last_error, self.failing = None, False
        return len(messages)

    def _failed(self, done: int, why: str) -> int:
        self.failing = True
        self._say(f"cannot take events: {why}; they wait in the outbox and are sent again")
        return done

    def _unreachable(self, exc: Exception) -> str:
        """A connection that failed, in the words cameras and brokers get; anything else as urllib says it."""
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        parts = urlsplit(self.url)
        if isinstance(reason, OSError) and not isinstance(reason, ssl.SSLError) and parts.hostname:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            return connection_failure(reason, parts.hostname, port, self.timeout_s, "the receiver runs")
        return str(reason)

    def _say(self, what: str) -> None:
        """One log line per change of trouble, not one per message."""
        error = f"{self.shown} {what}"
        if error != self.last_error:
            log.warning("%s", error)
        self.last_error = error


SINK = SinkKind("webhook", WebhookConfig, lambda options, index: Webhook(index, options))
