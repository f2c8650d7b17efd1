"""What a stream watches for: zones, lines, the tracker and when a tracked object becomes an event."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from edge_inference.edge.config.base import ConfigModel, Point, checked_points
from edge_inference.edge.config.frigate import points_from_text
from edge_inference.edge.config.messages import NAME


class ZoneConfig(ConfigModel):
    """A polygon: points in pixels, or all in 0..1 of the frame. An object is in it when its bottom centre is."""

    name: str = Field(pattern=NAME)  # the zone's name in stats, topics and events
    polygon: list[Point] = Field(min_length=3)  # [[x, y], ...] or Frigate's `x1,y1,x2,y2,...`

    @model_validator(mode="before")
    @classmethod
    def _frigate_form(cls, zone: Any) -> Any:
        """Frigate's `coordinates: 0.1,0.2,0.5,0.2,...` (a zone pasted from its config) is the polygon."""
        if isinstance(zone, dict) and "coordinates" in zone and "polygon" not in zone:
            zone = {("polygon" if key == "coordinates" else key): value for key, value in zone.items()}
        return zone

    @field_validator("polygon", mode="before")
    @classmethod
    def _pairs(cls, polygon: Any) -> Any:
        return points_from_text(polygon)

    @field_validator("polygon")
    @classmethod
    def _in_one_unit(cls, polygon: list[Point]) -> list[Point]:
        return checked_points(polygon, "zone")


class LineConfig(ConfigModel):
    """A line from `start` to `end` (pixels, or 0..1 of the frame); crossings are counted in each direction:
    `in` is from the line's right-hand side to its left, looking from start to end (supervision's convention)."""

    name: str = Field(pattern=NAME)  # the line's name in stats and topics
    start: Point  # [x, y]
    end: Point  # [x, y]

    @model_validator(mode="after")
    def _in_one_unit(self) -> LineConfig:
        checked_points([self.start, self.end], "line")
        return self


class TrackingConfig(ConfigModel):
    labels: list[str] = Field(default_factory=lambda: ["person"])  # tracked labels; [] tracks every label
    lost_after_s: float = Field(default=2.0, gt=0)  # how long a track survives without a detection


class EventsConfig(ConfigModel):
    """When a tracked object becomes an event: its label, a score and a number of frames, optionally in a zone."""

    labels: list[str] = Field(default_factory=lambda: ["person"])  # labels that make events (tracked too)
    zones: list[str] = Field(default_factory=list)  # only inside one of these zones; [] anywhere
    min_score: float = Field(default=0.5, ge=0, le=1)  # the least score a detection needs to count
    min_frames: int = Field(default=3, ge=1)  # detections before a tracked object becomes an event
    end_after_s: float = Field(default=3.0, gt=0)  # the event ends once its object is lost this long
