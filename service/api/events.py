"""Routes for stored events: list (filtered, paged), one event, its snapshot, and an SSE stream of changes."""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import FileResponse
from sse_starlette.event import ServerSentEvent
from starlette.concurrency import run_in_threadpool

from edge_inference.edge.events.recorder import EventRecorder, RecordedChange, missed_changes
from edge_inference.edge.events.store import EventQuery, EventStore, StoreBusy
from edge_inference.edge.stream.publish import Subscription
from edge_inference.service.api.common import EVENT_STREAM, manager_of, media
from edge_inference.service.errors import invalid, quoted
from edge_inference.service.schemas import EventOut, EventPage
from edge_inference.service.streaming import EventStream

router = APIRouter()
NOT_CONFIGURED = (
    "events are not configured: give a stream `tracking:` and `events:` in the config "
    "(deploy/events.example.yaml shows how)"
)


def _recorder(request: Request) -> EventRecorder:
    recorder = manager_of(request).events.recorder
    if recorder is None:
        raise HTTPException(404, NOT_CONFIGURED)
    return recorder


def _store(request: Request) -> EventStore:
    layer = manager_of(request).events
    _recorder(request)
    if layer.store is None:  # configured, but the data folder cannot be written: live changes only
        raise HTTPException(503, layer.problem or "events are not stored")
    return layer.store


MOMENT = (
    "seconds since the epoch (1764000000), or an ISO 8601 time (2026-11-24T18:00, the service's local time unless "
    "it says its zone: Z or +01:00; a date alone is its midnight)"
)


def _moment(name: str, text: str | None) -> float | None:
    """A time as a script or a person writes it: an epoch number, as Frigate's API takes, or ISO 8601."""
    if text is None or not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        try:
            value = datetime.fromisoformat(text.strip()).astimezone().timestamp()  # naive: local time
        except ValueError:
            value = math.nan
    if not math.isfinite(value):
        raise invalid("query", name, f"not a time: give {MOMENT}", text)
    return value


def _cursor(text: str | None) -> tuple[float, str] | None:
    if not text:
        return None
    try:
        start, event_id = json.loads(base64.urlsafe_b64decode(text.encode()))
        return float(start), str(event_id)
    except (ValueError, TypeError, binascii.Error, RecursionError):  # RecursionError: thousands of nested '['
        message = "not a cursor this service gave; pass the `next` of the previous page"
        raise invalid("query", "cursor", message, text) from None


@router.get(
    "/events",
    response_model=EventPage,
    summary="Stored events, newest first, filtered and paged",
    responses={404: {}, 503: {}},  # 404: events not configured; 503: configured, but not stored
)
def list_events(
    request: Request,
    stream: str | None = None,
    label: str | None = None,
    zone: Annotated[str | None, Query(description="Only events whose object entered this zone")] = None,
    after: Annotated[str | None, Query(description=f"Started at or after: {MOMENT}")] = None,
    before: Annotated[str | None, Query(description=f"Started before: {MOMENT}")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(description="The `next` of the previous page")] = None,
) -> EventPage:
    store = _store(request)
    moments = _moment("after", after), _moment("before", before)
    query = EventQuery(stream, label, zone, *moments, limit, _cursor(cursor))
    rows = store.query(query)
    page_end = None
    if len(rows) == limit:  # the answer rounds start to 1 ms; the cursor keeps the stored value
        page_end = base64.urlsafe_b64encode(json.dumps([rows[-1].event.start, rows[-1].event.id]).encode()).decode()
    return EventPage(events=[EventOut.model_validate(row.to_dict()) for row in rows], next=page_end)


@router.get(
    "/events/stream",
    summary="Server-Sent Events: one 'event' per event start, update and end, as they are stored",
    description="Each stored change carries an `id:`. A client that reconnects with it in `Last-Event-ID` (browsers' "
    "EventSource does this by itself) is first sent what it missed, even across a restart of the service: each event "
    "that changed meanwhile as it is now, its start where that came after, then its update or end. A client too slow "
    "for the changes is sent the ones it could not take the same way.",
    response_class=EventStream,
    responses=media(EVENT_STREAM, '`event: event`, `data:` {"type": "start"|"update"|"end", "event": an EventOut}'),
)
async def event_changes(request: Request) -> EventStream:
    recorder = _recorder(request)
    store = manager_of(request).events.store
    resume = _position(request.headers.get("last-event-id"))
    told = resume if resume is not None or store is None else store.position  # before subscribing: none in between
    subscription = recorder.changes.subscribe(256)  # before the replay: a change stored from now on is in either

    async def generate() -> AsyncIterator[bytes]:
        async for change in change_feed(subscription, store, told, replay=resume is not None):
            yield _sse_change(change)

    return EventStream(generate(), on_close=lambda: recorder.changes.unsubscribe(subscription))


async def change_feed(
    subscription: Subscription[RecordedChange], store: EventStore | None, told: float | None, replay: bool
) -> AsyncIterator[RecordedChange]:
    """The changes after position `told` from the store (with `replay`), then the live ones, each once and in
    order; what the subscription drops while its client is slow is taken from the store the same way. Ends with
    the service."""

    async def missed() -> list[RecordedChange]:
        if store is None or told is None:
            return []
        try:
            return await run_in_threadpool(missed_changes, store, told)
        except StoreBusy:  # a stalled disk: the live changes go on; what was missed is replayed another time
            return []

    dropped = 0
    pending = await missed() if replay else []
    while True:
        for change in pending:
            if change.position is not None and told is not None and change.position <= told:
                continue  # told already, in the replay
            told = change.position or told
            yield change
        pending = await subscription.batch()
        if not pending:  # the service is stopping
            return
        if subscription.dropped != dropped:  # it fell behind: what it could not take is in the store
            dropped = subscription.dropped
            pending = [*await missed(), *pending]


def _position(text: str | None) -> float | None:
    """A Last-Event-ID this service gave; anything else (another server's id, none) resumes nothing."""
    try:
        position = float(text) if text else None
    except ValueError:
        return None
    return position if position is not None and math.isfinite(position) and position >= 0 else None


def _sse_change(change: RecordedChange) -> bytes:
    # a change not stored (a full disk) has no place to resume from: no id
    place = None if change.position is None else repr(change.position)
    return ServerSentEvent(data=json.dumps(change.payload), event="event", id=place).encode()


@router.get("/events/{event_id}", response_model=EventOut, summary="One event", responses={404: {}, 503: {}})
def get_event(request: Request, event_id: str) -> EventOut:
    store = _store(request)
    stored = store.get(event_id)
    if stored is None:
        raise HTTPException(404, f"no event {quoted(event_id)}; it may have passed retention (storage.max_age_days)")
    return EventOut.model_validate(stored.to_dict())


@router.get(
    "/events/{event_id}/snapshot.jpg",
    summary="The event's best snapshot: the frame where its object was seen most clearly, with its box",
    response_class=FileResponse,
    responses=media("image/jpeg", "the snapshot") | {404: {}, 503: {}},
)
def event_snapshot(request: Request, event_id: str) -> FileResponse:
    store = _store(request)
    path = store.snapshot_path(event_id)
    if path is None:
        known = store.get(event_id) is not None
        detail = (
            f"event {quoted(event_id)} has no snapshot kept (storage.max_snapshot_mb removes the oldest)"
            if known
            else f"no event {quoted(event_id)}"
        )
        raise HTTPException(404, detail)
    return FileResponse(path, media_type="image/jpeg", headers={"Cache-Control": "no-cache"})
