"""POST /detect: an uploaded image through a stream's model (the work is `service/uploads.py`'s)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from edge_inference.service.api.common import (
    manager_of,
    pipeline_of,
)
from edge_inference.service.query_names import ALSO_READ
from edge_inference.service.schemas import DetectResponse
from edge_inference.service.upload_options import ALSO_READ_BY_UPLOADS, QUERY_PARAMETERS, upload_asks
from edge_inference.service.upload_text import image_bytes, refuse_url_parameter
from edge_inference.service.uploads import UploadDetectors, file_part, run_upload

router = APIRouter()


UPLOAD_BODY = {
    "required": True,
    "content": {
        "image/*": {"schema": {"type": "string", "format": "binary"}},
        "multipart/form-data": {
            "schema": {"type": "object", "properties": {"image": {"type": "string", "format": "binary"}}}
        },
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["image"],
                "properties": {"image": {"type": "string", "description": "the image in base64, or a data: URL"}},
            }
        },
        "text/plain": {"schema": {"type": "string", "description": "the image in base64, or a data: URL"}},
    },
}


@router.post(
    "/detect",
    response_model=DetectResponse,
    summary="Detect objects in an uploaded image",
    # the body is read raw and the thresholds under two names each, so FastAPI cannot declare them itself
    openapi_extra={"requestBody": UPLOAD_BODY, "parameters": QUERY_PARAMETERS, ALSO_READ: ALSO_READ_BY_UPLOADS},
    responses={
        400: {"description": "empty or malformed body"},
        404: {"description": "no such stream (the `stream` parameter)"},
        422: {"description": "a threshold out of range, or a class the model does not detect"},
        408: {"description": "the body did not arrive in time"},
        413: {"description": "body or pixel count over the limit"},
        415: {"description": "not an image (JPEG, PNG, BMP, WebP, TIFF, GIF, AVIF), or a truncated one"},
        503: {"description": "busy (see Retry-After), or the stream's model is not loaded"},
    },
)
async def detect(request: Request, stream: str | None = None) -> dict[str, Any]:
    """Send the image as the raw body or as a multipart file (base64, a data: URL or `{"image": "<base64>"}` are
    read too); `stream` picks whose model runs (default: the first). `conf`, `iou`, `max_det` and `classes` replace
    the stream's own for this image."""
    manager = manager_of(request)
    stream_id = stream or next(iter(manager.pipelines))
    pipeline_of(request, stream_id)
    server = request.app.state.config.server
    uploads: UploadDetectors = request.app.state.uploads
    limit = int(server.max_upload_mb * 1_000_000)
    max_pixels = int(server.max_upload_megapixels * 1_000_000)
    kind = request.headers.get("content-type", "").lower()
    multipart = kind.startswith("multipart/form-data")
    asks = upload_asks(request.query_params)

    def run(body: bytes) -> dict[str, Any]:
        refuse_url_parameter(body, request.query_params)
        data, name = file_part(body, request.headers, limit) if multipart else (image_bytes(body, kind), "upload")
        return uploads.detect(stream_id, data, name, max_pixels, asks)

    return await run_upload(request, limit, run)
