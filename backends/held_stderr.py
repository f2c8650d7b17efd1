"""Engines' C++ sides write on the process's stderr directly, lines no setting turns off, in the middle of `edge
detect`'s output and the service's log. `held_stderr(keep)` holds whatever reaches stderr (from any thread) while an
engine call runs; `keep` takes out the engine's own lines and returns the rest, which is written after: nothing else
is lost. `this_threads_stdout(into)` takes what the calling thread alone prints (an engine's Python banner), while
every other thread's output goes on as before."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any

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


class _ThreadSplitStdout:
    """sys.stdout while engine calls run: a capturing thread's writes go to its own sink, others' where they went."""

    def __init__(self, real: IO[str]) -> None:
        self.real = real
        self.sinks: dict[int, IO[str]] = {}

    def write(self, text: str) -> int:
        return self.sinks.get(threading.get_ident(), self.real).write(text)

    def flush(self) -> None:
        self.real.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


_SPLIT_LOCK = threading.Lock()
_split: _ThreadSplitStdout | None = None


@contextlib.contextmanager
def this_threads_stdout(into: IO[str]) -> Iterator[None]:
    """What this thread prints goes to `into`; `contextlib.redirect_stdout` would take every thread's output with it
    for as long as the call runs (a TensorRT build: minutes of the service's log and `edge detect`'s progress).
    Threads capturing at once share one splitter, put back when the last one leaves."""
    global _split
    me = threading.get_ident()
    with _SPLIT_LOCK:
        if _split is None:
            _split = _ThreadSplitStdout(sys.stdout)
            sys.stdout = _split
        _split.sinks[me] = into
    try:
        yield
    finally:
        with _SPLIT_LOCK:
            assert _split is not None
            del _split.sinks[me]
            if not _split.sinks:
                sys.stdout = _split.real
                _split = None
