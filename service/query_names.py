"""Query parameters a route does not take. One spelled nearly right (`?hieght=300`, `?qualty=50`) or named as
another tool names it (Frigate's `latest.jpg?h=300&bbox=1`, `?width=320`) used to be passed over: the snapshot came
at full size, and nothing said why. Such a name is now a 422 naming the parameter meant. A name like none of the
route's (a cache-buster `?t=1732500000` or `?_=...` that dashboards add, Roboflow's `api_key`, `format` and `labels`)
is still passed over, as HTTP APIs pass over what they do not read."""

from __future__ import annotations

import difflib
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import HTTPConnection

# Other tools' names for parameters of ours (Frigate's snapshot and MJPEG `h` and `bbox`, Ultralytics' and
# Roboflow's thresholds), and words users reach for
OTHER_NAMES = {
    "h": "height",
    "w": "height",
    "width": "height",
    "size": "height",
    "bbox": "boxes",
    "box": "boxes",
    "draw": "boxes",
    "q": "quality",
    "jpeg_quality": "quality",
    "rate": "fps",
    "framerate": "fps",
    "frame_rate": "fps",
    "threshold": "conf",
    "score": "conf",
    "min_score": "conf",
    "nms": "iou",
    "max": "max_det",
    "class": "classes",
    "camera": "stream",
    "cam": "stream",
}
EVERY_ROUTE = frozenset({"token"})  # the API token, where a client cannot send a header (EventSource, a video tag)
ALSO_READ = "x-query-also-read"  # a route's names read by the handler itself, beyond its OpenAPI parameters


def taken_names(route: APIRoute) -> frozenset[str]:
    """Every query name `route` reads: its declared parameters, those it declares by hand in OpenAPI, the other names
    it reads them under, and the token."""
    extra: dict[str, Any] = route.openapi_extra or {}
    declared = {param.alias for param in route.dependant.query_params}
    by_hand = {param["name"] for param in extra.get("parameters", []) if param.get("in") == "query"}
    return frozenset(declared | by_hand | set(extra.get(ALSO_READ, ())) | EVERY_ROUTE)


def meant(name: str, taken: frozenset[str]) -> str | None:
    """The parameter of `taken` that `name` most likely means; None for a name like none of them."""
    other = OTHER_NAMES.get(name.lower())
    if other in taken:
        return other
    near = difflib.get_close_matches(name.lower(), sorted(taken - EVERY_ROUTE), n=1, cutoff=0.75)
    return near[0] if near else None


async def check_query_names(connection: HTTPConnection) -> None:
    """An app-wide dependency: a 422 in FastAPI's shape for each query name that means one the route takes."""
    route = connection.scope.get("route")
    if not isinstance(route, APIRoute) or not connection.query_params:
        return
    taken = taken_names(route)
    errors = []
    for name, value in connection.query_params.multi_items():
        wanted = None if name in taken else meant(name, taken)
        if wanted is not None:
            shown = sorted(taken - EVERY_ROUTE)
            message = f"not a parameter here (did you mean {wanted}?); this address takes: {', '.join(shown)}"
            errors.append({"loc": ("query", name), "msg": message, "type": "extra_forbidden", "input": value})
    if errors:
        raise RequestValidationError(errors)
