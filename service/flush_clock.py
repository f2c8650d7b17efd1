"""One clock for every streaming client's writes: clients that flushed less than a period ago wait for its next tick
together, so the event loop wakes once a period for all of them, not once per client (a timer each)."""

from __future__ import annotations

import asyncio
import time


class FlushClock:
    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._tick: asyncio.Event | None = None  # the pending tick, while anyone waits for it
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop it is pending on
        self._last_tick = float("-inf")  # loop time of the last tick: the next is a period after it

    @property
    def last_tick(self) -> float:
        """The loop time the last tick was due at."""
        return self._last_tick

    async def pace(self, since: float) -> bool:
        """After a write begun at `since` (time.monotonic()): waits for the next tick, unless a period has passed
        already (a slow write is followed at once by the next); whether it waited."""
        if time.monotonic() - since < self.period_s:
            await self.next_tick()
            return True
        return False

    async def next_tick(self) -> None:
        """Returns at the next tick, at most a period from now. A waiter cancelled leaves the others waiting."""
        loop = asyncio.get_running_loop()
        tick = self._tick
        if tick is None or self._loop is not loop:  # none pending, or pending on a loop that has gone
            tick = self._tick = asyncio.Event()
            self._loop = loop
            when = self._last_tick + self.period_s
            if when <= loop.time():  # no tick for a period or more: the next one a period from now
                when = loop.time() + self.period_s
            loop.call_at(when, self._fire, tick, when)
        await tick.wait()

    def _fire(self, tick: asyncio.Event, when: float) -> None:
        if self._tick is tick:
            self._tick = None
            self._last_tick = when
        tick.set()
