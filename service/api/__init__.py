"""The HTTP API under /api/v1, one module per resource (as Frigate's `frigate/api/`): `streams` (detections and their
live streams), `media` (JPEG and MJPEG), `detect` (uploads), `events` (stored events), `compare`, `dashboard` (its
setup and live channel), `status` (engines, figures, metrics, health); `common` what they share. Routes are thin:
they call `edge` objects and declare `edge`'s dataclasses as response models."""

from __future__ import annotations

from edge_inference.service.api import compare, dashboard, detect, events, media, status, streams

# each included by the app under /api/v1 (routers nested in a router are opaque to what the app reads of its routes)
ROUTERS = tuple(part.router for part in (streams, media, detect, dashboard, compare, status, events))
