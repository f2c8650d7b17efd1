"""Token guessing is slowed per client address, not per request: one address guessing on 20 connections at once got
45.8 answers a second (4.3 on one), as each request waited its 0.25 s alone."""

from __future__ import annotations

import asyncio
import time

from edge_inference.service.guesses import DELAY_S, FREE, WrongTokens


def _guess_at_once(guesses: WrongTokens, client: str, count: int) -> float:
    async def together() -> float:
        started = time.monotonic()
        await asyncio.gather(*(guesses.refused({"client": (client, 40000 + n)}) for n in range(count)))
        return time.monotonic() - started

    return asyncio.run(together())


def test_guesses_on_many_connections_from_one_address_are_answered_one_after_another():
    held = 8
    took = _guess_at_once(WrongTokens(), "203.0.113.7", FREE + held)
    assert took >= held * DELAY_S, f"{FREE + held} guesses at once were all answered in {took:.2f} s"  # never sooner


def test_an_address_within_its_free_guesses_is_not_held_behind_a_guessing_one(monkeypatch):
    guesses = WrongTokens()
    _guess_at_once(guesses, "203.0.113.7", FREE + 2)
    now = time.monotonic()
    assert guesses.next_turn("203.0.113.7", now) >= now + DELAY_S  # the guesser's next turn is later still
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def counted_sleep(seconds: float) -> None:
        waits.append(seconds)
        await real_sleep(seconds)

    monkeypatch.setattr("edge_inference.service.guesses.asyncio.sleep", counted_sleep)
    _guess_at_once(guesses, "198.51.100.1", FREE)
    assert waits == []  # its free guesses are answered at once, not in the guesser's line
