"""Event changes POSTed as JSON to the configured URLs, through the outbox (retried until a 2xx)."""

from __future__ import annotations

import logging
import urllib.error
import urllib.request

from edge_inference.edge.config import WebhookConfig
from edge_inference.edge.events.store import Message
from edge_inference.edge.secrets import mask_url

log = logging.getLogger("edge.webhooks")


class Webhook:
    def __init__(self, index: int, config: WebhookConfig) -> None:
        self.sink = f"webhook:{index}"
        self.url = config.url.get_secret_value()
        self.timeout_s = config.timeout_s
        self.last_error: str | None = None

    def deliver(self, messages: list[Message]) -> int:
        for done, message in enumerate(messages):
            request = urllib.request.Request(  # noqa: S310 - http(s) only, checked in the config
                self.url, data=message.payload, method="POST", headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310
                    response.read()
            except (urllib.error.URLError, OSError, ValueError) as exc:
                error = f"webhook {mask_url(self.url)} failed: {exc}; kept in the outbox and retried"
                if error != self.last_error:
                    log.warning("%s", error)
                self.last_error = error
                return done
            self.last_error = None
        return len(messages)
