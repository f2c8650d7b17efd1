"""The configuration reference of the docs site, written from the config models themselves.

Every key of a config file, its type, default, limits and meaning, so the manual cannot drift from what the service
reads. The meaning is the comment the model gives the field (on its line or the lines above it: the code's own
words, kept where a reader of the code finds them too); each engine's `engine_options` from its options model.
"""

from __future__ import annotations

import ast
import inspect
import io
import textwrap
import tokenize
import types
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from edge_inference.backends import engines
from edge_inference.edge.config import ServiceConfig
from edge_inference.edge.config.messages import section_in
from edge_inference.edge.settings import OTHER_VARIABLES, Settings

LIMITS = {
    annotated_types.Gt: ("gt", "> {}"),
    annotated_types.Ge: ("ge", ">= {}"),
    annotated_types.Lt: ("lt", "< {}"),
    annotated_types.Le: ("le", "<= {}"),
    annotated_types.MinLen: ("min_length", "length >= {}"),
    annotated_types.MaxLen: ("max_length", "length <= {}"),
}


def config_reference() -> str:
    """The Markdown of every section of a config file, then every engine's options."""
    parts = [_section(path, model) for path, model in _sections(ServiceConfig, "")]
    parts.append(_engine_options())
    parts.append(_environment())
    return "\n\n".join(parts) + "\n"


def _sections(model: type[BaseModel], path: str) -> Iterator[tuple[str, type[BaseModel]]]:
    """The model, then every model its fields hold (a stream's motion, a list's items), depth first."""
    yield path, model
    for name, info in model.model_fields.items():
        inner = section_in(info.annotation)
        if inner is not None:
            yield from _sections(inner, _place(path, name, info))


def _place(path: str, name: str, info: FieldInfo) -> str:
    """A nested section's key path: `streams[].motion` (`[]` where the field holds a list of them)."""
    many = get_origin(info.annotation) is list
    return f"{path}.{name}{'[]' if many else ''}".lstrip(".")


def _section(path: str, model: type[BaseModel]) -> str:
    title = f"## `{path}` {{ #{_anchor(path)} }}" if path else "## The top level"
    doc = inspect.getdoc(model) if model.__doc__ else ""
    meanings = field_comments(model)
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        meaning = _with_limits(meanings.get(name, ""), info)
        kind = _cell(type_text(info.annotation))
        if section_in(info.annotation) is not None:  # the section's own table, linked
            place = _place(path, name, info)
            kind = f"{'list of ' if place.endswith('[]') else ''}[`{place}`](#{_anchor(place)})"
        rows.append(f"| `{name}` | {kind} | {_default(info)} | {_cell(meaning)} |")
    return "\n\n".join(part for part in (title, doc, "\n".join(rows)) if part)


def _engine_options() -> str:
    lines = [
        "## `streams[].engine_options` { #streams-engine_options }",
        "A block per engine, so `auto` and `compare` find theirs (`--engine-option ENGINE.KEY=VALUE` on the command "
        "line). `edge backends` lists the same, with what this machine has installed.",
    ]
    for key, engine in sorted(engines().items()):
        fields = engine.options.model_fields
        if not fields:
            continue
        rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
        rows += [
            f"| `{name}` | {_cell(type_text(info.annotation))} | {_default(info)} | {_cell(info.description or '')} |"
            for name, info in fields.items()
        ]
        lines.append(f"### `{key}`\n\n" + "\n".join(rows))
    return "\n\n".join(lines)


def _environment() -> str:
    """The EDGE_* variables every command reads (the settings), then those read where they are used."""
    meanings = field_comments(Settings)
    rows = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    for name, info in Settings.model_fields.items():
        default = _default(info).replace(str(Path.home()), "~")
        meaning = _with_limits(meanings.get(name, ""), info)
        rows.append(f"| `EDGE_{name.upper()}` | {_cell(type_text(info.annotation))} | {default} | {_cell(meaning)} |")
    others = ", ".join(f"`{name}`" for name in sorted(OTHER_VARIABLES))
    return "\n\n".join(
        [
            "## Environment { #environment }",
            "Read by every command; a config file's own setting wins where both say (the flags win over both).",
            "\n".join(rows),
            f"Read where they are used (debugging, hardware roots, program paths, the tests' media): {others}.",
        ]
    )


def field_comments(model: type[BaseModel]) -> dict[str, str]:
    """Each field's comment: the comment lines right above its definition, then the one at the end of its line."""
    source = textwrap.dedent(inspect.getsource(model))
    comments: dict[int, tuple[str, bool]] = {}  # line -> (text, the line holds nothing else)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            alone = not token.line[: token.start[1]].strip()
            comments[token.start[0]] = (token.string.lstrip("#").strip(), alone)
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    found = {}
    for node in body.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above: list[str] = []
            line = node.lineno - 1
            while line in comments and comments[line][1]:
                above.insert(0, comments[line][0])
                line -= 1
            after = comments.get(node.lineno)
            said = above + ([after[0]] if after and not after[1] else [])
            found[node.target.id] = " ".join(said)
    return found


def type_text(annotation: Any) -> str:
    """A field's type as a config's author reads it: `auto | live | file`, `number`, `list of text`."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join(type_text(a) for a in args if a is not type(None))
    if origin in (list, tuple):
        return f"list of {_grouped(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {_grouped(args[0])} to {_grouped(args[1])}" if args else "mapping"
    if origin is not None and args:  # Annotated
        return type_text(args[0])
    return _plain_type(annotation)


def _grouped(annotation: Any) -> str:
    text = type_text(annotation)
    return f"({text})" if " | " in text else text


def _plain_type(annotation: Any) -> str:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section (below)"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " | ".join(str(member.value) for member in annotation)
    names = {
        str: "text",
        int: "integer",
        float: "number",
        bool: "true | false",
        Path: "path",
        SecretStr: "secret",
        Any: "any",
    }
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _with_limits(meaning: str, info: FieldInfo) -> str:
    limits = _limits(info)
    if not limits:
        return meaning
    return f"{meaning} ({limits})" if meaning else limits


def _limits(info: FieldInfo) -> str:
    said = []
    for item in info.metadata:
        for kind, (attribute, form) in LIMITS.items():
            if isinstance(item, kind):
                said.append(form.format(getattr(item, attribute)))
        pattern = getattr(item, "pattern", None)
        if pattern:
            said.append(f"matching `{pattern}`")
    return ", ".join(said)


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    return _value(info.get_default(call_default_factory=True))


def _value(value: Any) -> str:
    if isinstance(value, BaseModel):
        return "its defaults"
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, Enum):
        value = value.value
    return _cell(f"`{value}`") if value not in ("", [], {}) else "empty"


def _anchor(path: str) -> str:
    """`streams[].motion` -> `streams-motion`: an id the table's links can name."""
    return "-".join(part for part in path.replace("[]", "").split(".") if part)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
