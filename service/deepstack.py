"""DeepStack's detection API (`POST /v1/vision/detection`), as Blue Iris, Agent DVR and Home Assistant's
deepstack_object integration (through the deepstack-python client) call it, and as CodeProject.AI Server answers it:
a form with the `image` file, `min_confidence` and `api_key`; `{"success": true, "predictions": [{"label",
"confidence", "x_min", "y_min", "x_max", "y_max"}]}`. `/v1/vision/custom/<name>` runs the stream called <name>;
`custom/list` lists them.
A failure is `{"success": false, "error": ...}` with the status `/api/v1/detect` gives it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from edge_inference.service.api.common import manager_of
from edge_inference.service.errors import quoted
from edge_inference.service.upload_options import UploadAsks
from edge_inference.service.uploads import UploadDetectors, file_and_fields, run_upload

router = APIRouter(tags=["DeepStack / CodeProject.AI"])


class Prediction(BaseModel):
    label: str
    confidence: float
    x_min: int
    y_min: int
    x_max: int
    y_max: int


class ModelList(BaseModel):
    success: bool
    models: list[str]


class Answer(BaseModel):
    success: bool
    predictions: list[Prediction] = []
    count: int = 0
    inferenceMs: int = 0  # CodeProject.AI's names
    processMs: int = 0
    error: str | None = None
    code: int | None = None


DEFAULT_MIN_CONFIDENCE = 0.45  # DeepStack's own default
FORM = {
    "multipart/form-data": {
        "schema": {
            "type": "object",
            "required": ["image"],
            "properties": {
                "image": {"type": "string", "format": "binary"},
                "min_confidence": {"type": "number", "default": DEFAULT_MIN_CONFIDENCE},
                "api_key": {"type": "string", "description": "the service's token, where it has one"},
            },
        }
    }
}
ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {"model": Answer, "description": "the detections, DeepStack's way"},
    400: {"description": "no image, or min_confidence not a fraction"},
    401: {"description": "the service has a token and api_key is not it"},
    404: {"description": "no stream of that name (custom)"},
    413: {"description": "body or pixel count over the limit"},
    415: {"description": "not an image"},
    503: {"description": "busy, or the stream's model is not loaded"},
}


@router.post(
    "/v1/vision/detection",
    summary="DeepStack's object detection, on the first stream's model",
    openapi_extra={"requestBody": {"content": FORM}},
    response_model=None,
    responses=ANSWERS,
)
async def detection(request: Request) -> JSONResponse:
    return await _answer(request, None)


@router.get("/v1/vision/custom/list", include_in_schema=False)  # the same, for a browser or curl
@router.post(
    "/v1/vision/custom/list",
    summary="CodeProject.AI's list of custom models (Blue Iris asks for it): the streams, by name",
    response_model=None,
    responses={200: {"model": ModelList, "description": "the names custom/<name> takes"}, 401: ANSWERS[401]},
)
async def custom_list(request: Request) -> JSONResponse:
    """The caller is known before this runs: its token in a header, or its form's api_key read by the access check
    (at most the form's first bytes: `form_key.py`), never the whole body."""
    return JSONResponse({"success": True, "models": list(manager_of(request).pipelines)})


@router.post(
    "/v1/vision/custom/{name}",
    summary="DeepStack's custom-model detection: the model of the stream called `name`",
    openapi_extra={"requestBody": {"content": FORM}},
    response_model=None,
    responses=ANSWERS,
)
async def custom(request: Request, name: str) -> JSONResponse:
    return await _answer(request, name)


def failure(status: int, error: str) -> JSONResponse:
    return JSONResponse({"success": False, "error": error, "code": status}, status_code=status)


async def _answer(request: Request, stream: str | None) -> JSONResponse:
    try:
        return JSONResponse(await _detect(request, stream))
    except HTTPException as exc:
        return failure(exc.status_code, str(exc.detail))


async def _detect(request: Request, stream: str | None) -> dict[str, Any]:
    pipelines = manager_of(request).pipelines
    stream_id = stream or next(iter(pipelines))
    if stream_id not in pipelines:
        raise HTTPException(
            404, f"no model {quoted(stream_id)} here: custom/<name> names a stream ({', '.join(pipelines)})"
        )
    server = request.app.state.config.server
    uploads: UploadDetectors = request.app.state.uploads
    limit = int(server.max_upload_mb * 1_000_000)
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise HTTPException(400, "send a form with the image as its `image` file, as DeepStack takes it")

    def run(body: bytes) -> dict[str, Any]:  # the caller is known: the access check read the form's key first
        data, name, fields = file_and_fields(body, request.headers, limit)
        asks = UploadAsks(conf=_min_confidence(fields.get("min_confidence")))
        return uploads.detect(stream_id, data, name, int(server.max_upload_megapixels * 1_000_000), asks)

    return _predictions(await run_upload(request, limit, run))


def _min_confidence(text: str | None) -> float:
    if not text:
        return DEFAULT_MIN_CONFIDENCE
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise HTTPException(400, f"min_confidence {text[:40]!r} is not a fraction of 1 (0.45 is DeepStack's default)")
    return value


def _predictions(record: dict[str, Any]) -> dict[str, Any]:
    timings = record["timings_ms"]
    predictions = [
        {
            "label": d["label"],
            "confidence": round(float(d["score"]), 4),
            **dict(zip(("x_min", "y_min", "x_max", "y_max"), (round(v) for v in d["box"]), strict=True)),
        }
        for d in record["detections"]
    ]
    return {
        "success": True,
        "predictions": predictions,
        "count": len(predictions),
        "inferenceMs": round(timings["inference"]),
        "processMs": round(sum(v for k, v in timings.items() if k in ("preprocess", "inference", "postprocess"))),
    }
