"""From tracked boxes to events: a watched object that stays long enough has a start, updates and an end.

A track becomes an event once it has been seen `min_frames` times with at least `min_score` (inside one of the
event's zones, when it names any), so one noisy box never makes an event. The event is updated when its object
enters a zone, crosses a line or is seen clearly enough for a better snapshot, and ends once the object has been
lost for `end_after_s` and the tracker has let its track go: a track the tracker may still match again (it keeps
a lost track for `lost_after_s`) keeps its event open, so one object is one event under one track id. Pure
bookkeeping, run on the decode thread: snapshots are encoded and events stored elsewhere (`recorder.py`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from edge_inference.edge.config import EventsConfig
from edge_inference.edge.stream.tracking import LineState, ZoneState
from edge_inference.models.detection import BoxXYXY, Detection
from edge_inference.models.labels import LabelSet

Kind = Literal["start", "update", "end"]
BETTER_SNAPSHOT = 0.05  # a snapshot is replaced when the score improves by this much
SNAPSHOT_UPDATE_EVERY_S = 2.0  # at most this often, so a flickering score does not flood the outputs


@dataclass(frozen=True)
class Event:
    id: str
    stream: str
    label: str
    track_id: int
    start: float  # seconds since the epoch
    end: float | None  # None while the event goes on
    best_score: float
    zones: tuple[str, ...]  # zones entered, in order
    lines: tuple[str, ...]  # "line:in" / "line:out" for each crossing, in order
    frames: int  # frames the object was seen in

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "stream": self.stream,
            "label": self.label,
            "track_id": self.track_id,
            "start": round(self.start, 3),
            "end": None if self.end is None else round(self.end, 3),
            "best_score": round(self.best_score, 4),
            "zones": list(self.zones),
            "lines": list(self.lines),
            "frames": self.frames,
        }


@dataclass(frozen=True)
class Snapshot:
    """The frame where the event's object was seen best; encoded to JPEG by the recorder."""

    image: np.ndarray = field(repr=False)
    box: BoxXYXY
    score: float


@dataclass(frozen=True)
class EventChange:
    kind: Kind
    event: Event
    snapshot: Snapshot | None  # set when the best snapshot changed


@dataclass
class _Track:
    label: str
    seen: int = 0  # frames that qualify (score, zone)
    frames: int = 0  # frames seen since the event started, counted here: the Event is rebuilt only when it changes
    last_seen: float = 0.0  # wall time, for the event's end
    last_seen_clock: float = 0.0  # monotonic, for how long it has been lost
    best_score: float = -1.0  # the best sighting's score (-1: none yet)
    # That sighting's frame while no change has carried it to the recorder yet (a snapshot waiting to be sent): a
    # frame is a megabyte or more, and tracks waiting for nothing must not keep one each.
    best: Snapshot | None = None
    zones: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    event: Event | None = None
    snapshot_changed_at: float = 0.0  # monotonic


class EventBuilder:
    """One per stream; `observe` is called with every analysed frame, `finish` when the stream stops."""

    def __init__(self, stream_id: str, config: EventsConfig) -> None:
        self.stream_id = stream_id
        self.config = config
        self.labels = LabelSet(config.labels)
        self._tracks: dict[int, _Track] = {}

    @property
    def active(self) -> list[Event]:
        return [replace(t.event, frames=t.frames) for t in self._tracks.values() if t.event is not None]

    def observe(
        self,
        detections: list[Detection],
        zones: tuple[ZoneState, ...],
        lines: tuple[LineState, ...],
        image: np.ndarray,
        now: float,
        clock: float | None = None,
        held: frozenset[int] = frozenset(),
    ) -> list[EventChange]:
        """`now`: the frame's wall time, which events are stamped with; `clock`: a monotonic time of the same frame
        (default: `now`), which every duration is measured on, so a jump of the wall clock (NTP setting a Pi's
        clock after boot) neither ends every event at once nor keeps one open for the hours it went back. `held`:
        the track ids the tracker still keeps; their events stay open."""
        clock = now if clock is None else clock
        changes: list[EventChange] = []
        for detection in detections:
            if detection.track_id is None or detection.label not in self.labels:
                continue
            track = self._tracks.setdefault(detection.track_id, _Track(detection.label))
            changed = self._follow(track, detection, zones, lines, image, now, clock)
            change = self._change(track, detection.track_id, now, clock, changed)
            if change is not None:
                changes.append(change)
        changes.extend(self._end_lost(now, clock, held=held))
        return changes

    def finish(self, now: float) -> list[EventChange]:
        """The stream stops: every event in progress ends now."""
        return self._end_lost(now, now, everything=True)

    def _follow(
        self,
        track: _Track,
        detection: Detection,
        zones: tuple[ZoneState, ...],
        lines: tuple[LineState, ...],
        image: np.ndarray,
        now: float,
        clock: float,
    ) -> bool:
        """Record this sighting; True when something an update reports changed (zone, line)."""
        track_id = detection.track_id
        track.last_seen, track.last_seen_clock = now, clock
        inside = [z.name for z in zones if track_id in z.track_ids]
        changed = False
        for name in inside:
            if name not in track.zones:
                track.zones.append(name)
                changed = True
        for line in lines:
            for direction, ids in (("in", line.just_in), ("out", line.just_out)):
                if track_id in ids:
                    track.lines.append(f"{line.name}:{direction}")
                    changed = True
        wanted_zone = not self.config.zones or any(name in self.config.zones for name in inside)
        if detection.score >= self.config.min_score and wanted_zone:
            track.seen += 1
        if track.best_score < 0 or detection.score >= track.best_score + BETTER_SNAPSHOT:
            track.best, track.best_score = Snapshot(image, detection.box, detection.score), detection.score
        return changed

    def _change(self, track: _Track, track_id: int, now: float, clock: float, changed: bool) -> EventChange | None:
        if track.event is None:
            if track.seen < self.config.min_frames:
                return None
            track.frames = track.seen
            track.event = self._event(track, track_id, now)
            snapshot, track.best, track.snapshot_changed_at = track.best, None, clock
            return EventChange("start", track.event, snapshot)
        track.frames += 1
        snapshot_due = track.best is not None and clock - track.snapshot_changed_at >= SNAPSHOT_UPDATE_EVERY_S
        if not (changed or snapshot_due):
            return None
        snapshot = track.best
        if snapshot is not None:
            track.best, track.snapshot_changed_at = None, clock
        track.event = self._event(track, track_id, now)
        return EventChange("update", track.event, snapshot)

    def _event(self, track: _Track, track_id: int, now: float) -> Event:
        previous = track.event
        best = max(track.best_score, 0.0)
        return Event(
            id=previous.id if previous else uuid.uuid4().hex,
            stream=self.stream_id,
            label=track.label,
            track_id=track_id,
            start=previous.start if previous else now,
            end=None,
            best_score=max(best, previous.best_score if previous else 0.0),
            zones=tuple(track.zones),
            lines=tuple(track.lines),
            frames=track.frames,
        )

    def _end_lost(
        self, now: float, clock: float, everything: bool = False, held: frozenset[int] = frozenset()
    ) -> list[EventChange]:
        ended = []
        for track_id, track in list(self._tracks.items()):
            if not everything and (clock - track.last_seen_clock < self.config.end_after_s or track_id in held):
                continue
            del self._tracks[track_id]
            if track.event is not None:
                final = replace(self._event(track, track_id, now), end=track.last_seen)
                ended.append(EventChange("end", final, track.best))
        return ended
