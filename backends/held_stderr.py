"""Engines' C++ sides write on the process's stderr directly, lines no setting turns off, in the middle of `edge
detect`'s output and the service's log. `held_stderr(keep)` holds whatever reaches stderr (from any thread) while an
engine call runs; `keep` takes out the engine's own lines and returns the rest, which is written after: nothing else
is lost."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator

_STDERR_SWAP = threading.Lock()


@contextlib.contextmanager
def held_stderr(keep: Callable[[bytes], bytes]) -> Iterator[None]:
    with _STDERR_SWAP, tempfile.TemporaryFile() as held:
        try:
            sys.stderr.flush()
            saved = os.dup(2)
            os.dup2(held.fileno(), 2)
        except (OSError, ValueError):  # no real stderr (embedded, closed): nothing to hold
            yield
            return
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            rest = keep(held.read())
            if rest:
                os.write(2, rest)
