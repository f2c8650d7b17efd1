"""What an upload asks for besides the stream's own reporting: the least score, the NMS overlap, how many boxes and
which classes, under Ultralytics' names (`conf`, `iou`, `max_det`, `classes`) and Roboflow's (`confidence`,
`overlap`, `max_detections`). A parameter that is read is honoured; a value it cannot take is a 422 saying why."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fastapi.exceptions import RequestValidationError
from starlette.datastructures import QueryParams

from edge_inference.edge.config import classes_from_text
from edge_inference.edge.detection.detector import Detector, Reporting
from edge_inference.models.labels import labels_listed, unknown_classes
from edge_inference.service.errors import invalid
from edge_inference.service.upload_text import URL_PARAMETERS

MOST_BOXES = 1000
FRACTION = "a fraction from 0 to 1 (50% is 0.5)"
NAMES = {"conf": ("conf", "confidence"), "iou": ("iou", "overlap"), "max_det": ("max_det", "max_detections")}
# every query name an upload is read under, beyond its OpenAPI parameters (service/query_names.py)
ALSO_READ_BY_UPLOADS = sorted({name for names in NAMES.values() for name in names} | set(URL_PARAMETERS))


@dataclass(frozen=True)
class UploadAsks:
    conf: float | None = None
    iou: float | None = None
    max_det: int | None = None
    classes: list[str | int] = field(default_factory=list)

    def reporting(self, detector: Detector) -> Reporting | None:
        """The detector's reporting with these asks in it; None where nothing is asked."""
        if self == UploadAsks():
            return None
        unknown = unknown_classes(detector.spec.labels, self.classes)
        if unknown:
            shown = labels_listed(list(detector.spec.labels.values()))
            message = f"{detector.spec.name} does not detect {', '.join(unknown)}; its classes: {shown}"
            raise invalid("query", "classes", message, ",".join(map(str, self.classes)))
        return detector.reporting(self.conf, self.iou, self.max_det, dict.fromkeys(self.classes))


def upload_asks(params: QueryParams) -> UploadAsks:
    """Read from the query; 422 in FastAPI's shape for a value out of range or not a number."""
    conf, conf_name = _given(params, "conf")
    iou, iou_name = _given(params, "iou")
    most, most_name = _given(params, "max_det")
    return UploadAsks(
        conf=None if conf is None else _fraction(conf_name, conf),
        iou=None if iou is None else _fraction(iou_name, iou),
        max_det=None if most is None else _count(most_name, most),
        classes=classes_from_text(params.getlist("classes")),
    )


def _given(params: QueryParams, key: str) -> tuple[str | None, str]:
    """The value under the first of the key's names that is present (an empty value counts as absent)."""
    for name in NAMES[key]:
        if params.get(name):
            return params[name], name
    return None, key


def _fraction(name: str, text: str) -> float:
    value = _number(name, text)
    if not 0.0 <= value <= 1.0:
        raise _bad(name, f"must be {FRACTION}", text)
    return value


def _count(name: str, text: str) -> int:
    value = _number(name, text)
    if value != int(value) or not 1 <= value <= MOST_BOXES:
        raise _bad(name, f"must be a whole number from 1 to {MOST_BOXES}", text)
    return int(value)


def _number(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _bad(name, "must be a number", text) from None
    if not math.isfinite(value):
        raise _bad(name, "must be a finite number", text)
    return value


def _bad(name: str, message: str, value: Any) -> RequestValidationError:
    return invalid("query", name, message, value)


QUERY_PARAMETERS = [
    {
        "name": "conf",
        "in": "query",
        "required": False,
        "schema": {"type": "number", "minimum": 0, "maximum": 1},
        "description": "Least score reported, for every class (default: the stream's); `confidence` is read too",
    },
    {
        "name": "iou",
        "in": "query",
        "required": False,
        "schema": {"type": "number", "minimum": 0, "maximum": 1},
        "description": "NMS overlap threshold (default: the stream's); `overlap` is read too",
    },
    {
        "name": "max_det",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": MOST_BOXES},
        "description": "Most boxes reported (default: the stream's); `max_detections` is read too",
    },
    {
        "name": "classes",
        "in": "query",
        "required": False,
        "schema": {"type": "array", "items": {"type": "string"}},
        "style": "form",
        "explode": True,
        "description": "Report only these classes, labels or class ids (person,car or 0,2); they replace the "
        "stream's classes",
    },
]
