"""What every config section shares: the base model, the error, points in a frame, sections keyed by name."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from edge_inference.edge.errors import EdgeError


class FrozenMap(dict[Any, Any]):
    """A mapping nothing can change once made: a loaded config's and a compiled plan's (a dict, so JSON, pydantic and
    pickle take it as one)."""

    def _refuse(self, *_: object, **__: object) -> None:
        raise TypeError("a loaded config cannot be changed: copy it (model_copy(update=...)) with what differs")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]
    __ior__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenMap, (dict(self),))

    def __copy__(self) -> FrozenMap:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenMap:
        return self


class FrozenList(list[Any]):
    """A list nothing can change once made (a list still, so pydantic serialises it as the field declares)."""

    def _refuse(self, *_: object, **__: object) -> None:
        raise TypeError("a loaded config cannot be changed: copy it (model_copy(update=...)) with what differs")

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenList, (list(self),))

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenList:
        return self


def frozen(value: Any) -> Any:
    """Lists as FrozenLists and dicts as FrozenMaps, all the way down (models are frozen themselves)."""
    if isinstance(value, FrozenList | FrozenMap):
        return value
    if isinstance(value, list):
        return FrozenList(frozen(item) for item in value)
    if isinstance(value, dict) and not isinstance(value, FrozenMap):
        return FrozenMap({key: frozen(item) for key, item in value.items()})
    return value


class ConfigModel(BaseModel):
    """Every section of a config: a key it does not know is refused (with the nearest it does: messages.py),
    never dropped, as Frigate's FrigateBaseModel does."""

    # frozen: a plan compiled from a config holds its sections; nothing may change them after (issue 82)
    model_config = ConfigDict(extra="forbid", frozen=True)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Any:
        """A copy with what differs, read-only as the original (pydantic's copy does not validate again)."""
        return super().model_copy(update=None if update is None else dict(frozen(dict(update))), deep=deep)

    @model_validator(mode="after")
    def _nothing_changes(self) -> Any:
        """Its lists and dicts made read-only once validated (pydantic's frozen guards the fields alone)."""
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, list | dict) and not isinstance(value, FrozenList | FrozenMap):
                object.__setattr__(self, name, frozen(value))
        return self


class ConfigError(EdgeError):
    pass


Point = tuple[float, float]


def are_fractions(points: list[Point]) -> bool:
    """Points in 0..1 of the frame, every coordinate of them; otherwise they are pixels."""
    return all(0 <= value <= 1 for point in points for value in point)


def checked_points(points: list[Point], kind: str) -> list[Point]:
    """Points are 0..1 of the frame only when every coordinate is; one typed past 1 ((1.2, 0.5) among fractions)
    made them all pixels, a shape a pixel or two across that nothing ever enters or crosses."""
    if are_fractions(points):
        return points
    xs, ys = [x for x, _ in points], [y for _, y in points]
    width, height = max(xs) - min(xs), max(ys) - min(ys)
    length = math.hypot(width, height)
    if (kind != "line" and min(width, height) < 2) or (kind == "line" and length < 2):
        x, y = next(point for point in points if not are_fractions([point]))
        size = f"{width:g}x{height:g} pixels across" if kind != "line" else f"{length:.3g} pixels long"
        raise ValueError(
            f"({x:g}, {y:g}) is not in 0..1, so the {kind}'s points are read as pixels: a {kind} {size}; keep every "
            "coordinate in 0..1 of the frame, or write them all in pixels"
        )
    return points


def listed_by_key(items: Any, key: str, what: str) -> Any:
    """A mapping of name to settings (Frigate writes cameras and zones so) as the list of settings this config
    takes, each with its name under `key`; anything else as it is."""
    if not isinstance(items, dict) or not all(isinstance(v, dict | None) for v in items.values()):
        return items
    listed = []
    for name, settings in items.items():
        given = (settings or {}).get(key, name)
        if given != name:
            raise ValueError(f"{name} has {key}: {given}; leave {key} out where the key names the {what}")
        listed.append({**(settings or {}), key: str(name)})
    return listed
