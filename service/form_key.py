"""The token a DeepStack client sends inside its form (`api_key`), read before any other work for the request.

DeepStack's protocol carries the key in the body, beside the image. The body was read whole (inside the upload gate,
whose clock started only once a slot was won) before the key was looked at: ten unauthenticated sockets sending a
byte a second held every upload slot, and `custom/list` wrote 597 MB to a temporary file for a client that then got
401. Here only the bytes the key can take are read (`KEY_BYTES`), under the body's one clock from its first byte,
outside any shared slot; what was read is handed to the route unchanged once the key is accepted. deepstack-python
(Home Assistant's deepstack_object) puts `api_key` before the image, as `requests` writes form fields before files.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from starlette.types import Message, Receive

KEY_BYTES = 16 * 1024  # the form's first bytes the key must be within: a part header and a token, many times over
DISPOSITION_NAME = re.compile(rb'(?im)^content-disposition:[^\r\n]*\bname="?([^";\r\n]+)"?')


class ClientGone(Exception):
    """The client went away before its request's body came."""


@dataclass
class FormKey:
    """What reading for the key found: the key (None when the form has none within KEY_BYTES), and the body's
    messages read so far, to be handed on as they came."""

    key: str | None
    read: list[Message] = field(default_factory=list)
    timed_out: bool = False

    def replaying(self, receive: Receive) -> Receive:
        """`receive` for the route: the messages already read first, then the rest of the body."""
        pending = list(self.read)

        async def replay() -> Message:
            if pending:
                return pending.pop(0)
            return await receive()

        return replay


def _found(data: bytes, content_type: str, complete: bool) -> str | bool | None:
    """The key in what was read: its value, None when there is none (the form ended, or KEY_BYTES passed without it),
    False while more bytes may bring it."""
    kind = content_type.lower()
    if kind.startswith("multipart/form-data"):
        boundary = re.search(r'boundary="?([^";]+)"?', content_type)
        if boundary is None:
            return None
        parts = data.split(b"--" + boundary.group(1).encode())
        # a part with the next delimiter after it is whole, whatever comes later (the last piece may be cut short)
        for part in parts[1:-1]:
            head, separator, value = part.partition(b"\r\n\r\n")
            name = DISPOSITION_NAME.search(head)
            if separator and name is not None and name.group(1) == b"api_key":
                return value.removesuffix(b"\r\n").decode("utf-8", "replace")
    elif kind.startswith("application/x-www-form-urlencoded"):
        text = data.decode("latin-1")
        if complete or re.search(r"(?:^|&)api_key=[^&]*&", text):
            values = parse_qs(text).get("api_key")
            return values[0] if values else None
    else:
        return None
    return None if complete or len(data) >= KEY_BYTES else False


async def read_form_key(receive: Receive, content_type: str, deadline: float) -> FormKey:
    """Read the body until the key is known, KEY_BYTES have come, or `deadline` (the event loop's clock) passes."""
    loop = asyncio.get_running_loop()
    found = FormKey(None)
    data = b""
    while True:
        left = deadline - loop.time()
        if left <= 0:
            found.timed_out = True
            return found
        try:
            message = await asyncio.wait_for(receive(), left)
        except TimeoutError:
            found.timed_out = True
            return found
        if message["type"] == "http.disconnect":
            raise ClientGone
        found.read.append(message)
        before = len(data)
        data += message.get("body", b"")[: KEY_BYTES - before]
        complete = not message.get("more_body", False)
        if not (complete or len(data) >= KEY_BYTES or _may_end_a_field(data, before, content_type)):
            continue  # nothing new can be whole yet: no parse (a client sending a byte a message costs no more)
        key = _found(data, content_type, complete)
        if key is not False:
            found.key = key if isinstance(key, str) else None
            return found


def _may_end_a_field(data: bytes, before: int, content_type: str) -> bool:
    """Whether the bytes after `before` end a field: a multipart delimiter or an `&` arrived among them. A field is
    whole only then, so the form is parsed once per field, not once per message."""
    if content_type.lower().startswith("application/x-www-form-urlencoded"):
        return b"&" in data[before:]
    boundary = re.search(r'boundary="?([^";]+)"?', content_type)
    if boundary is None:
        return True
    delimiter = b"--" + boundary.group(1).encode()
    return delimiter in data[max(0, before - len(delimiter) + 1) :]
