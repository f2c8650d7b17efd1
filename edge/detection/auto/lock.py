"""One measurement at a time on a machine, across processes: an flock beside the cache, its holder named."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from edge_inference.edge.detection.auto.figures import CHILD_STOP_S, ROUNDS, Say
from edge_inference.edge.detection.auto.store import cache_path
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import Settings

HOLDER_SLACK_S = 2.0  # beyond a measurement's own limits: storing it

LOCK_POLL_S = 0.2  # how often a process waiting for another's measurement looks again


def longest_measurement_s(engines: int, settings: Settings) -> float:
    """The longest a measurement of `engines` engines can take, by the limits `_measure` enforces: every engine
    loads within the budget (all at once), each of its rounds answers within the round plus the budget or it is
    dropped, and each child ends within CHILD_STOP_S of being told to or is killed."""
    budget = settings.auto_budget_s
    return budget + ROUNDS * engines * (settings.auto_round_s + budget) + engines * CHILD_STOP_S + HOLDER_SLACK_S


@contextlib.contextmanager
def measuring_on_this_machine(settings: Settings, say: Say | None = None, engines: int = 1) -> Iterator[None]:
    """One measurement at a time on this machine, across processes (a service and `edge detect --backend auto`
    started together, two services): engines timed side by side slow each other down and rank at random, and two
    writers of the cache would lose one's entry. An flock on a file beside the cache, which holds its holder's
    process id and how long its measurement can take; the kernel releases it when its holder dies. A holder that
    is stopped (Ctrl-Z) or stuck is waited for no longer than that (then an EdgeError). Where no lock file can be
    made, the measurement goes on without it (keeping it will say why)."""
    cache = cache_path(settings)
    path = cache.with_name(cache.name + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")  # noqa: SIM115 - held for the body of the with below
    except OSError:
        yield
        return
    with handle:
        longest = longest_measurement_s(engines, settings)
        if not _locked(handle):
            _wait_for_holder(handle, longest, say)
        with contextlib.suppress(OSError):  # who holds it and until when, for a process that waits (a full disk: not)
            handle.truncate(0)
            handle.write(f"{os.getpid()} {time.monotonic():.3f} {longest:.1f}\n")
            handle.flush()
        yield


def _locked(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@dataclass(frozen=True)
class _Holder:
    """What the process holding the measurement wrote: who, and when its measurement must have ended (the
    system-wide monotonic clock, which a Pi's clock jumping at its first NTP sync does not move)."""

    pid: int
    ends_by: float


def _wait_for_holder(handle: IO[str], own_longest_s: float, say: Say | None) -> None:
    """Until the lock is free, or the holder's measurement has run past the longest its own limits allow (by our own
    limits while it has not said them yet)."""
    holder = _holder(handle)
    if say is not None:
        say(f"another edge process on this machine{_named(holder)} is timing engines; waiting for it to finish first")
    fallback = time.monotonic() + own_longest_s
    while not _locked(handle):
        holder = _holder(handle) or holder
        if time.monotonic() > (holder.ends_by if holder else fallback):
            raise EdgeError(
                f"the edge process{_named(holder)} timing engines on this machine has held the measurement longer"
                " than a measurement can take: it is stopped (Ctrl-Z) or stuck. End it (or `kill -CONT` it), or set"
                " EDGE_AUTO_MEASURE=0 to choose by the engines' ranking"
            )
        time.sleep(LOCK_POLL_S)


def _named(holder: _Holder | None) -> str:
    return f" (pid {holder.pid})" if holder else ""


def _holder(handle: IO[str]) -> _Holder | None:
    """The lock file's record, or None while its holder has not written it (or an older version wrote only a pid)."""
    with contextlib.suppress(OSError, ValueError):
        handle.seek(0)
        pid, started, longest = handle.read().split()
        return _Holder(int(pid), float(started) + float(longest))
    return None
