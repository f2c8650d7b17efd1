"""`${NAME}` in a config's values, read from edge's environment, as Docker Compose writes it: a camera's password
or a broker's kept out of a file that is shared, pasted into a forum or committed (systemd's `EnvironmentFile=`,
Compose's `environment:`). Only the braced form is read, so a password such as `pa$$word` stays as it is written;
`$${` writes a literal `${`."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from edge_inference.edge.settings import unquoted

# ${NAME}, ${NAME:-default} (unset or empty), ${NAME-default} (unset), ${NAME:?why} / ${NAME?why} (required)
_REFERENCE = re.compile(r"\$\$\{|\$\{([^{}]*)\}")
_FORMS = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:-|-|:\?|\?)(?P<word>.*))?", re.DOTALL)
WHERE_TO_SET = (
    "set it where edge starts (a systemd unit's Environment= or EnvironmentFile=, `docker run -e`, Compose's "
    "environment:), or give a default: ${NAME:-value}"
)


MAX_FILLED_BYTES = 8 << 20  # what `${NAME}` fills, in all: the same bound as a config's text (config/messages.py)


class EnvironmentReferenceError(ValueError):
    """A reference that cannot be filled; its text says where and what to do."""


def filled_from_environment(data: Any, environ: Mapping[str, str] | None = None, where: str = "") -> Any:
    """`data` (a parsed config) with every `${NAME}` in its string values filled from `environ` (os.environ): a new
    string at each place a reference is met, aliases included, so what is made is counted as it is made."""
    made = [0]
    return _fill(data, os.environ if environ is None else environ, where, made)


def _fill(data: Any, environ: Mapping[str, str], where: str, made: list[int]) -> Any:
    if isinstance(data, dict):
        return {key: _fill(value, environ, _joined(where, key), made) for key, value in data.items()}
    if isinstance(data, list):
        return [_fill(value, environ, _joined(where, index), made) for index, value in enumerate(data)]
    if isinstance(data, str) and "${" in data:
        filled = _REFERENCE.sub(lambda match: _filled(match, environ, where or "file"), data)
        made[0] += len(filled)
        if made[0] > MAX_FILLED_BYTES:
            raise EnvironmentReferenceError(
                f"{where or 'file'}: the values filled from the environment come to more than "
                f"{MAX_FILLED_BYTES >> 20} MiB (a reference used through many aliases, or a huge variable): a config "
                "is a few KB"
            )
        return filled
    return data


def _joined(where: str, key: object) -> str:
    return f"{where}.{key}" if where else str(key)


def _filled(match: re.Match[str], environ: Mapping[str, str], where: str) -> str:
    if match.group(0) == "$${":
        return "${"
    inside = match.group(1)
    form = _FORMS.fullmatch(inside)
    if form is None:
        raise EnvironmentReferenceError(
            f"{where}: ${{{inside}}} is not an environment variable's name (letters, digits and '_', not starting "
            "with a digit); to write ${ as it is, write $${"
        )
    name, op, word = form.group("name"), form.group("op"), form.group("word")
    value = environ.get(name)
    if op in (":-", ":?") and value == "":
        value = None
    if value is not None:
        return unquoted(value)  # `- PORCH_PASSWORD="..."` in Compose's list form: the quotes are not the password's
    if op in (":-", "-"):
        return str(word)
    if op in (":?", "?") and word:
        raise EnvironmentReferenceError(f"{where}: ${{{name}}} is not set: {word}")
    raise EnvironmentReferenceError(
        f"{where}: ${{{name}}} is not set in edge's environment{' (or is empty)' if op == ':?' else ''}; "
        + WHERE_TO_SET.replace("NAME", name)
    )
