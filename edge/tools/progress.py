"""Progress a tool shows while it works: a bar on a terminal, plain lines in a log.

A conversion run by systemd or into a file wrote tqdm's bar there as one line of carriage returns, redrawn ten
times a second for minutes (issue 81). Without a terminal the same figures go out as lines: the first soon (so a
watcher knows it started), then every LINE_EVERY_S, and the last when the step ends, each with the count, the time
taken and, where the total is known, the time left.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from tqdm import tqdm

FIRST_LINE_S = 1.0
LINE_EVERY_S = 10.0


class LineProgress:
    """tqdm's `update`/`close` and context manager, written as lines."""

    def __init__(
        self, total: int | None, desc: str, unit: str, estimate: bool = True, out: TextIO | None = None
    ) -> None:
        self.total, self.desc, self.unit, self.estimate = total, desc, unit, estimate
        self.out = out or sys.stderr
        self.count = 0
        self.started = time.monotonic()
        self._next = self.started + FIRST_LINE_S
        self._closed = False

    def update(self, count: int = 1) -> None:
        self.count += count
        now = time.monotonic()
        if now >= self._next:
            self._next = now + LINE_EVERY_S
            self._say(now)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._say(time.monotonic(), done=True)

    def _say(self, now: float, done: bool = False) -> None:
        took = now - self.started
        of = f"/{self.total}" if self.total else ""
        line = f"{self.desc}: {self.count}{of} {self.unit}s, {took:.0f} s"
        if not done and self.estimate and self.total and self.count:
            line += f", about {took * (self.total - self.count) / self.count:.0f} s left"
        self.out.write(line + (" (done)" if done else "") + "\n")
        self.out.flush()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def shown_progress(
    total: int | None, desc: str, unit: str, shown: bool, estimate: bool = True, **bar: Any
) -> tqdm[Any] | LineProgress:
    """A bar on a terminal, lines elsewhere; nothing at all where `shown` is False (`--no-progress`). `estimate`:
    the total is what the step will do, so the time left can be said (not a cap such as frames read at most)."""
    if shown and not sys.stderr.isatty():
        return LineProgress(total, desc, unit, estimate)
    return tqdm(total=total, desc=desc, unit=unit, disable=not shown, **bar)
