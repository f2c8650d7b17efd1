"""Detections as small immutable values with their geometry on them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BoxXYXY:
    """An axis-aligned box in pixels: top-left (x1, y1), bottom-right (x2, y2)."""

    x1: float
    y1: float
    x2: float
    y2: float

    @property
    def width(self) -> float:
        return max(0.0, self.x2 - self.x1)

    @property
    def height(self) -> float:
        return max(0.0, self.y2 - self.y1)

    @property
    def area(self) -> float:
        return self.width * self.height

    def scale(self, sx: float, sy: float) -> BoxXYXY:
        return BoxXYXY(self.x1 * sx, self.y1 * sy, self.x2 * sx, self.y2 * sy)

    def iou(self, other: BoxXYXY) -> float:
        ix = max(0.0, min(self.x2, other.x2) - max(self.x1, other.x1))
        iy = max(0.0, min(self.y2, other.y2) - max(self.y1, other.y1))
        inter = ix * iy
        union = self.area + other.area - inter
        return inter / union if union > 0 else 0.0

    def as_list(self, ndigits: int = 1) -> list[float]:
        return [round(self.x1, ndigits), round(self.y1, ndigits), round(self.x2, ndigits), round(self.y2, ndigits)]


@dataclass(frozen=True, slots=True)
class Detection:
    class_id: int
    label: str
    score: float
    box: BoxXYXY
    track_id: int | None = None  # the same object across frames, when the stream tracks

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "label": self.label,
            "class_id": self.class_id,
            "score": round(self.score, 4),
            "box": self.box.as_list(),
        }
        if self.track_id is not None:
            out["track_id"] = self.track_id
        return out
