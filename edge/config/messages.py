"""What a config's mistakes are answered with: where (as the file writes it) and what to write instead."""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

NAME = r"^[A-Za-z0-9_-]{1,64}$"  # stream, zone, line and device names: they go into URLs, MQTT topics and metrics

OWN_KEYS = "x-"  # top-level keys left to the user, as Docker Compose leaves them: a place for `&anchors`

# Other programs' names for our settings (Frigate's, Ultralytics'), as users bring them over
OTHER_NAMES = {
    "cameras": "streams",
    "threshold": "conf",
    "confidence": "conf",
    "min_score": "conf",
    "path": "source",
    "url": "source",
    "input": "source",
    "inputs": "source",
    "detector": "backend",
    "objects": "classes",
    "class_filter": "classes",
}
# Other programs' settings that have no place here, and what takes their part
ELSEWHERE = {
    "imgsz": (
        "the model's input size is its file's own (a model exported with a dynamic input takes width and height in "
        "its sidecar, model.onnx.yaml); a stream's width and height ask a camera for its resolution"
    ),
}


def explain(
    exc: ValidationError, root: type[BaseModel], data: Any = None, renamed: Mapping[str, str] | None = None
) -> str:
    """One line: where (as the file writes it) and what to do, for each problem. `renamed`: top-level keys the file
    writes under another name (a Frigate file's `cameras` are the `streams` validated)."""

    def where(loc: tuple[int | str, ...]) -> str:
        written = as_written(loc, data)
        if written and renamed and written[0] in renamed:
            written[0] = renamed[str(written[0])]
        return ".".join(map(str, written)) or "file"

    return "; ".join(f"{where(e['loc'])}: {_message(e, where(e['loc'][:-1]), root)}" for e in exc.errors())


def as_written(loc: tuple[int | str, ...], data: Any) -> list[int | str]:
    """A place in the validated lists as the file writes it: an entry of a mapping by name (Frigate's form, streams
    and zones keyed by id: `streams.porch.zones.driveway`, not `streams.0.zones.1`)."""
    written: list[int | str] = []
    node = data
    for part in loc:
        if isinstance(part, int) and isinstance(node, dict) and 0 <= part < len(node):
            part = list(node)[part]
            written.append(part)
            node = node[part]
            continue
        written.append(part)
        inside = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        node = node[part] if inside else node.get(part) if isinstance(node, dict) else None
    return written


# ... and those of one place (Frigate's zone keys)
ELSEWHERE_IN = {
    ("zones", "objects"): (
        "the labels a zone counts are the stream's (tracking: labels); events: {labels: [...], zones: [name]} keeps "
        "the events of those labels in that zone"
    ),
    ("zones", "inertia"): "events: min_frames is how many frames an object is seen before its event starts",
}


def _message(error: Any, section: str, root: type[BaseModel]) -> str:
    """Pydantic's words, with what to write instead where a user's usual slip is known: for a key the config does
    not know (a typo, another program's name for a setting) the nearest key and the keys that place takes; for a
    name, what a name may hold; for a number written as text or a fraction as a percentage, the number."""
    kind, loc, value = error["type"], error["loc"], error.get("input")
    keys = _keys_at(root, loc[:-1]) if kind == "extra_forbidden" else []
    if keys:
        return _unknown_key_answer(tuple(loc), keys, section)
    if kind == "string_pattern_mismatch" and error.get("ctx", {}).get("pattern") == NAME:
        return _not_a_name(value)
    written = number_as_written(value, str(loc[-1])) if kind in NUMBER_PARSING and isinstance(value, str) else None
    message = str(error["msg"]).removeprefix("Value error, ")
    if kind == "less_than_equal" and error.get("ctx", {}).get("le") == 1:
        written = fraction_as_percentage(value)
    return _no_stream(kind, tuple(loc), value) or written or message


NUMBER_PARSING = ("float_parsing", "int_parsing")


def _unknown_key_answer(loc: tuple[int | str, ...], keys: list[str], section: str) -> str:
    """Another program's setting with its place here, or the nearest key and the keys that place takes."""
    key = str(loc[-1])
    place = next((part for part in reversed(loc[:-1]) if isinstance(part, str)), "")
    if (place, key) in ELSEWHERE_IN:
        return f"not a setting: {ELSEWHERE_IN[place, key]}"
    if key in ELSEWHERE:
        return f"not a setting: {ELSEWHERE[key]}"
    return _unknown_key(key, keys, section)


def _not_a_name(value: Any) -> str:
    # Café -> Cafe, not Caf_: the letter without its accent
    plain = unicodedata.normalize("NFKD", str(value)).encode("ascii", "ignore").decode()
    example = re.sub(r"[^A-Za-z0-9_-]+", "_", plain).strip("_")[:64] or "porch"
    return (
        f"{value!r} is not a name: use 1 to 64 letters, digits, '-' and '_' (names go into URLs, MQTT topics and "
        f"metrics), e.g. {example}"
    )


def fraction_as_percentage(value: Any) -> str | None:
    """A fraction of 1 written as a percentage (`conf: 50`): the fraction meant."""
    if isinstance(value, int | float) and 1 < value <= 100:
        return f"{value:g} is more than 1: it is a fraction of 1, so {value:g}% is {value / 100:g}"
    return None


# A number written with its unit, in the unit a setting's name ends with (`recheck_s: 30s`, `max_snapshot_mb: 1GB`)
_WRITTEN_NUMBER = re.compile(r"\s*([-+]?\d+(?:[.,]\d+)?)\s*([A-Za-z%]*)\s*")
_UNITS: dict[str, dict[str, float]] = {
    "_s": {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "ms": 0.001, "m": 60, "min": 60, "mins": 60,
           "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600},
    "_mb": {"mb": 1, "mib": 1, "m": 1, "gb": 1024, "gib": 1024, "g": 1024, "kb": 1 / 1024, "kib": 1 / 1024},
    "_days": {"d": 1, "day": 1, "days": 1, "w": 7, "week": 7, "weeks": 7},
}  # fmt: skip
_UNIT_WORDS = {"_s": "seconds", "_mb": "MiB", "_days": "days"}


def number_as_written(text: str, key: str) -> str | None:
    """What to write for a number YAML read as text: `0,45` (a decimal comma), `50%` (a fraction's percentage),
    `30s`, `1GB`, `5 fps` (the unit is in the setting's name); None when the text is not a number at all."""
    written = _WRITTEN_NUMBER.fullmatch(text)
    if written is None:
        return None
    digits, unit = written.group(1), written.group(2).lower()
    value = float(digits.replace(",", "."))
    if "," in digits and not unit:
        return f"{text!r} has a decimal comma: write {value:g}"
    if unit == "%":
        return f"{text!r} is a percentage: write the fraction of 1, {value / 100:g}"
    if unit and (key == unit or key.endswith(f"_{unit}")):  # `fps: 5 fps`, `client_flush_hz: 10hz`
        return f"{text!r} has its unit written, which the setting's name gives: write {value:g}"
    suffix = next((end for end in _UNITS if key.endswith(end)), None)
    if suffix is not None and unit in _UNITS[suffix]:
        meant = value * _UNITS[suffix][unit]
        return f"{text!r} has its unit written: {key} is in {_UNIT_WORDS[suffix]}, so write {meant:g}"
    return f"{text!r} is not a number: write the number alone ({value:g}), in the unit the setting's name gives"


def _unknown_key(key: str, keys: list[str], section: str) -> str:
    near = _nearest_key(key, keys)
    where = "the top level" if section == "file" else section
    free = f"; keys starting with {OWN_KEYS} are yours (for YAML anchors)" if section == "file" else ""
    return f"not a setting{f' (did you mean {near}?)' if near else ''}; {where} takes: {', '.join(keys)}{free}"


def _no_stream(kind: str, loc: tuple[int | str, ...], value: Any) -> str | None:
    """A first config's missing pieces: no stream at all (`streams: []`, `streams:` alone, left out), no id."""
    if loc == ("streams",) and (kind in ("too_short", "missing") or value is None):
        return "no streams: give at least one, e.g. streams: [{id: porch, source: 0}]"
    if kind == "missing" and loc[0] == "streams" and loc[-1] == "id":
        return "missing: each stream needs an id (letters, digits, '-', '_'), its name in URLs and topics: id: porch"
    return None


def _nearest_key(key: str, keys: list[str]) -> str | None:
    """Another program's name for a setting this section has, or a close spelling of one."""
    if OTHER_NAMES.get(key) in keys:
        return OTHER_NAMES[key]
    near = difflib.get_close_matches(key, keys, n=1, cutoff=0.75)
    return near[0] if near else None


def _keys_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys of the config section at `loc` (list indexes pass through to the list's item)."""
    section: type[BaseModel] | None = root
    for part in loc:
        if isinstance(part, int):
            continue
        field = section.model_fields.get(part) if section is not None else None
        section = section_in(field.annotation) if field is not None else None
    return list(section.model_fields) if section is not None else []


def section_in(annotation: Any) -> type[BaseModel] | None:
    """The config section a field holds: itself, or inside `list[...]`, `dict[..., ...]` or `... | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for inner in get_args(annotation):
        found = section_in(inner)
        if found is not None:
            return found
    return None


_SECOND_STREAM = " (another stream is one more item in the same streams: list)"


class _UniqueKeysLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping, which it would take silently, the second
    replacing the first: a second `streams:` pasted below the first dropped every camera above it. Keys merged in
    with `<<: *anchor` may still be given again: that is what a merge is for."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, yaml.Node] = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                earlier = first.setdefault(key, key_node)
            except TypeError:  # an unhashable key: PyYAML's own words for it follow
                continue
            if earlier is not key_node:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"{key} is given twice in one mapping (first at line {earlier.start_mark.line + 1}), and the "
                    f"second would replace the first: keep one{_SECOND_STREAM if key == 'streams' else ''}",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep)


MAX_CONFIG_BYTES = 1 << 20  # a config of many cameras is a few KB
MAX_CONFIG_VALUES = 100_000  # values, once every alias (`*name`) is counted where it is used
MAX_CONFIG_DEPTH = 64  # levels of nesting: a config needs a handful
# the text of its values, once every alias is counted where it is used, and once `${NAME}` is filled: one 150 KB
# string aliased 9^4 times counted as 6,561 values and reached 1.06 GB
MAX_EXPANDED_BYTES = 8 << 20


class ConfigShapeError(ValueError):
    """A config no person writes: too large, nested too deep, or aliases that expand without end."""


def read_config_bytes(path: Path) -> bytes:
    """At most MAX_CONFIG_BYTES of the file (`--config /dev/zero` was read until memory ran out)."""
    with path.open("rb") as handle:
        data = handle.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigShapeError(
            f"is larger than {MAX_CONFIG_BYTES // 1024} KiB: a config is a few KB of YAML; is this the right file?"
        )
    return data


def _check_shape(root: yaml.Node) -> None:
    """Counts what the document holds with every alias expanded where it is used, as a program walking the loaded
    config meets it (PyYAML's safe loader shares them, so a "billion laughs" loads in no time and grew to 1.24 GB
    later): memoised per node, iteratively, so neither a long chain of aliases nor a deep nesting recurses here."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    text: dict[int, int] = {}  # bytes of its scalars' text, aliases expanded
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if not children_done:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        sizes[id(node)] = min(1 + sum(sizes[id(child)] for child in children), MAX_CONFIG_VALUES + 1)
        depths[id(node)] = 1 + max((depths[id(child)] for child in children), default=0)
        own = len(node.value) if isinstance(node, yaml.ScalarNode) else 0
        text[id(node)] = min(own + sum(text[id(child)] for child in children), MAX_EXPANDED_BYTES + 1)
        if text[id(node)] > MAX_EXPANDED_BYTES:
            raise ConfigShapeError(
                f"expands to more than {MAX_EXPANDED_BYTES >> 20} MiB of text once its aliases (*name) are counted "
                f"where they are used (line {node.start_mark.line + 1}): a config is a few KB; write the values out"
            )
        if sizes[id(node)] > MAX_CONFIG_VALUES:
            raise ConfigShapeError(
                f"expands to more than {MAX_CONFIG_VALUES} values once its aliases (*name) are counted where they are "
                f"used (line {node.start_mark.line + 1}): a config is never that large; write the values out"
            )
        if depths[id(node)] > MAX_CONFIG_DEPTH:
            raise ConfigShapeError(f"nests deeper than {MAX_CONFIG_DEPTH} levels: a config needs a handful")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_yaml(data: bytes | str) -> Any:
    """yaml.safe_load, with a key given twice refused where it is, and a document no person writes (too deep, or
    aliases expanding past MAX_CONFIG_VALUES) refused before anything is built from it."""
    loader = _UniqueKeysLoader(data)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise ConfigShapeError(f"nests deeper than {MAX_CONFIG_DEPTH} levels: a config needs a handful") from None
        if node is None:
            return None
        _check_shape(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


# PyYAML's words for the two mistakes users make most, and what each usually is
_PLAIN_WORDS = {
    "found character '\\t' that cannot start any token": (
        "a tab, and YAML indents and separates with spaces only: replace it with spaces"
    ),
    "mapping values are not allowed here": (
        "mapping values are not allowed here (usually a line indented deeper than the key above it, or a value "
        "holding ': ' that needs quotes)"
    ),
}


def yaml_problem(exc: yaml.YAMLError) -> str:
    """Where the YAML breaks (1-based line and column, as an editor counts) and what the parser expected."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    problem = _PLAIN_WORDS.get(problem, problem)
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and context_mark is not None:
        problem += f" ({context} that starts at line {context_mark.line + 1})"
    return f"{where}: {problem}"


def _line_and_column(text: str, at: int) -> str:
    """As an editor counts, from 1."""
    return f"line {text.count(chr(10), 0, at) + 1}, column {at - text.rfind(chr(10), 0, at)}"


def unreadable_text(exc: yaml.reader.ReaderError, data: bytes) -> str:
    """PyYAML's reader refuses a file before parsing it: bytes that are not text in its encoding (a file saved as
    Latin-1 or Windows-1252 with an accent in it) or a control character. Where, and what to do."""
    if exc.encoding == "unicode":  # a control character: the position counts characters of the decoded text
        encoding = "utf-16-le" if data[:2] == b"\xff\xfe" else "utf-16-be" if data[:2] == b"\xfe\xff" else "utf-8"
        where = _line_and_column(data.decode(encoding, errors="replace"), exc.position)
        return f"has a control character (0x{exc.character:02x}) at {where}, which YAML does not allow: remove it"
    byte = f"0x{exc.character:02x}" if isinstance(exc.character, int) else repr(exc.character)
    where = _line_and_column(data.decode("latin-1"), exc.position)  # one character a byte: the position holds
    return (
        f"is not {exc.encoding.upper()} text (byte {byte} at {where}): save it as UTF-8 (an editor's Save As offers it)"
    )
