"""POST /detect's uploads: the body read within its size and time limits, the file taken out of a multipart form,
the image decoded within the pixel limit, and run on the stream's upload detector.

Upload detectors: one per stream configuration, separate from the stream's own, loaded on first use. A detector that
fails to load is not retried on every request: the failure is remembered for a while and answered
with 503, while the stream's own retries (with backoff) say in /health/ready when the model is back.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

from fastapi import HTTPException, Request
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect

from edge_inference.backends import brief
from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.loader import load_detector
from edge_inference.edge.detection.report import result_record
from edge_inference.edge.errors import counted
from edge_inference.edge.runtime.streams import StreamManager
from edge_inference.edge.stream.images import ImageError, ImageTooLargeError, decode_image
from edge_inference.service.access import body_deadline
from edge_inference.service.limits import UploadGate, busy
from edge_inference.service.upload_options import UploadAsks

log = logging.getLogger("edge.uploads")
RETRY_LOAD_AFTER_S = 10.0


STOPPING = "the service is stopping: send the image again once it is back"


async def run_upload(request: Request, limit: int, work: Callable[[bytes], dict[str, Any]]) -> dict[str, Any]:
    """The body read within `limit` bytes, then `work` on it in a worker thread (decoding and inference never run on
    the event loop), within the upload gate: beyond its workers and queue, 503 with Retry-After at once."""
    gate: UploadGate = request.app.state.upload_gate
    async with gate.slot():
        try:
            body = await read_body(request, limit, request.app.state.config.server.send_timeout_s)
            return await asyncio.to_thread(work, body)
        except asyncio.CancelledError:
            if not request.app.state.shutdown.is_set():
                raise
            # uvicorn cancels what still runs once server.shutdown_timeout_s is up: an answer, not a 500
            raise HTTPException(503, STOPPING, headers={"Retry-After": "10"}) from None


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The raw body, refused with 413 past `limit` bytes (declared or read) and 408 once `timeout_s` has passed
    since its first byte (one clock, started by the access check, whatever waited meanwhile). A client that goes
    away mid-body is one quiet line."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"image is larger than the {limit / 1e6:g} MB limit (max_upload_mb)")
    body = bytearray()

    async def read() -> None:
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > limit:
                raise HTTPException(413, f"image is larger than the {limit / 1e6:g} MB limit (max_upload_mb)")

    left = body_deadline(request.scope) - asyncio.get_running_loop().time()
    try:
        await asyncio.wait_for(read(), max(0.0, min(left, timeout_s)))
    except TimeoutError:
        raise HTTPException(408, f"the upload did not arrive within {timeout_s:g} s") from None
    except ClientDisconnect:
        log.debug("%s: the client went away mid-body", request.url.path)
        raise ClientWentAway from None
    return bytes(body)


class ClientWentAway(HTTPException):
    """Nobody is there to answer: the route ends, quietly (`errors.py` sends nothing and logs nothing)."""

    def __init__(self) -> None:
        super().__init__(499, "the client went away")


def file_part(body: bytes, headers: Headers, limit: int) -> tuple[bytes, str]:
    """The one file field of a multipart body; runs in a worker thread (parsing is CPU work), on its own loop.
    Several files are refused: one of them was answered and the others dropped without a word."""
    data, name, _fields = file_and_fields(body, headers, limit)
    return data, name


def file_and_fields(body: bytes, headers: Headers, limit: int) -> tuple[bytes, str, dict[str, str]]:
    """`file_part`, with the form's text fields (DeepStack's `min_confidence`, `api_key`)."""
    from starlette.formparsers import MultiPartParser

    async def replay() -> AsyncGenerator[bytes, None]:
        yield body

    async def parse() -> tuple[bytes, str, dict[str, str]]:
        try:
            form = await MultiPartParser(headers, replay(), max_part_size=limit).parse()
        except Exception as exc:  # noqa: BLE001 - malformed multipart bodies come in many shapes
            raise HTTPException(400, f"malformed multipart body: {brief(str(exc), 200)}") from None
        try:
            files = [value for _key, value in form.multi_items() if not isinstance(value, str)]
            if len(files) > 1:
                names = ", ".join((file.filename or "unnamed")[:60] for file in files[:5])
                many = counted(len(files), "file")
                raise HTTPException(
                    400, f"{many} in one request ({names}): send one image a request, each in its own POST"
                )
            if files:
                fields = {key: value for key, value in form.multi_items() if isinstance(value, str)}
                return await files[0].read(), (files[0].filename or "upload")[:200], fields
        finally:
            await form.close()
        raise HTTPException(
            400, "multipart body has no file part; send the image as a file field, e.g. -F image=@x.jpg"
        )

    return asyncio.run(parse())


class UploadModelUnavailableError(Exception):
    """The stream's model cannot run uploads now; the message says why and when it is tried again."""


class UploadDetectors:
    def __init__(self, manager: StreamManager) -> None:
        self.manager = manager
        self._detectors: dict[str, Detector] = {}
        self._failed: dict[str, tuple[float, str]] = {}  # stream -> (when, why) of the last failed load
        self._locks: dict[str, threading.Lock] = {s: threading.Lock() for s in manager.pipelines}

    def lock(self, stream_id: str) -> threading.Lock:
        """Held while a detector is loaded or used: engines and input buffers are not shared between threads."""
        return self._locks[stream_id]

    def get(self, stream_id: str) -> Detector:
        """Call with the stream's lock held."""
        if stream_id in self._detectors:
            return self._detectors[stream_id]
        pipeline = self.manager.pipelines[stream_id]
        if not pipeline.ready:
            why = f": {pipeline.error}" if pipeline.error else ""
            raise UploadModelUnavailableError(f"stream {stream_id}'s model is not loaded ({pipeline.state}{why})")
        failed = self._failed.get(stream_id)
        if failed and time.monotonic() - failed[0] < RETRY_LOAD_AFTER_S:
            raise UploadModelUnavailableError(f"stream {stream_id}'s model failed to load for uploads: {failed[1]}")
        try:
            plan = self.manager.plan_of(stream_id)
            detector = load_detector(plan.detector, self.manager.settings, files=plan.files)
        except Exception as exc:  # noqa: BLE001 - any engine failure: remembered and answered with 503
            self._failed[stream_id] = (time.monotonic(), str(exc))
            raise UploadModelUnavailableError(f"stream {stream_id}'s model failed to load for uploads: {exc}") from None
        self._failed.pop(stream_id, None)
        self._detectors[stream_id] = detector
        return detector

    def close(self) -> None:
        for detector in self._detectors.values():
            detector.close()

    def detect(
        self, stream_id: str, data: bytes, name: str, max_pixels: int, asks: UploadAsks | None = None
    ) -> dict[str, Any]:
        """Decode and detect; runs in a worker thread. The answer is `edge detect --json`'s record."""
        try:
            image = decode_image(data, name, max_pixels=max_pixels)
        except ImageTooLargeError as exc:
            raise HTTPException(413, str(exc)) from None
        except ImageError as exc:
            raise HTTPException(415 if data else 400, str(exc)) from None
        with self.lock(stream_id):
            try:
                detector = self.get(stream_id)
            except UploadModelUnavailableError as exc:
                raise busy(f"{exc}; try again later") from None
            reporting = asks.reporting(detector) if asks else None
            return result_record(name, detector.detect(image, reporting), detector)
