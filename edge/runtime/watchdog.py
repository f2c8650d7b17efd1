"""One thread that looks at every stream twice a second: stalled sources, stuck detectors (see their `check`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

log = logging.getLogger("edge.watchdog")
PERIOD_S = 0.5


class Checked(Protocol):
    def check(self, now: float) -> None: ...


class Watchdog:
    def __init__(self, units: Callable[[], Iterable[Checked]], period_s: float = PERIOD_S) -> None:
        self._units = units
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            now = time.monotonic()
            for unit in self._units():
                try:
                    unit.check(now)
                except Exception:  # a bug in one check must not end the watch over the others
                    log.exception("watchdog: checking %r failed", unit)
