"""Wrong tokens, per client: guessing is slowed and said in the log.

One connection sent 307 requests a second with wrong tokens and nothing was logged. Past `FREE` wrong tokens in a
minute, each further 401 to that client is answered in its turn, `DELAY_S` after the one before from the same address
(on the event loop: nobody else waits), so a client guesses a few times a second whatever the number of its
connections (before, each request waited `DELAY_S` alone: 20 connections guessed 45.8 times a second); the log says
so once a minute per client. All clients together past their free guesses get `ALL_PER_S` answers a second.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from starlette.types import Scope

log = logging.getLogger("edge.access")
WINDOW_S = 60.0
FREE = 10  # wrong tokens a minute answered at once: a user pasting the wrong one, a client restarting
DELAY_S = 0.25
ALL_PER_S = 20  # wrong tokens past FREE answered a second, all clients together
CLIENTS = 1024  # clients remembered at most (a spoofing storm cannot grow it)


class WrongTokens:
    def __init__(self) -> None:
        self._recent: dict[str, deque[float]] = {}
        self._said: dict[str, float] = {}
        self._turn: dict[str, float] = {}  # client -> when its last held-back guess is answered
        self._turn_all = 0.0

    def next_turn(self, client: str, now: float) -> float:
        """When this held-back guess is answered: after the client's last one, and in line with everyone's."""
        turn = max(now, self._turn.pop(client, 0.0)) + DELAY_S
        self._turn_all = max(now, self._turn_all) + 1 / ALL_PER_S
        turn = max(turn, self._turn_all)
        self._turn[client] = turn
        while len(self._turn) > CLIENTS:
            self._turn.pop(next(iter(self._turn)))
        return turn

    def count(self, client: str, now: float) -> int:
        """Wrong tokens from `client` in the last minute, this one included."""
        times = self._recent.pop(client, None) or deque()
        times.append(now)
        while times and times[0] < now - WINDOW_S:
            times.popleft()
        self._recent[client] = times  # to the end: the least recent client is the first forgotten
        while len(self._recent) > CLIENTS:
            self._recent.pop(next(iter(self._recent)))
        return len(times)

    async def refused(self, scope: Scope) -> None:
        """A request with a wrong token: counted, and held back once its client guesses."""
        client = (scope.get("client") or ("unknown",))[0]
        now = time.monotonic()
        count = self.count(client, now)
        if count <= FREE:
            return
        if now - self._said.get(client, -WINDOW_S) >= WINDOW_S:
            self._said[client] = now
            while len(self._said) > CLIENTS:
                self._said.pop(next(iter(self._said)))
            log.warning(
                "client %s sent %d wrong tokens in the last minute: each further one is answered %g s after the one "
                "before from that address",
                client,
                count,
                DELAY_S,
            )
        await asyncio.sleep(self.next_turn(client, now) - now)
