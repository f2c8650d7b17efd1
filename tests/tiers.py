"""The suite's tiers, by what a test starts, and the guard that keeps them true.

- in-process (no marker): no child process, no network socket; what a plain `pytest` runs.
- `process`: one server or subprocess of ours or of a peer (`edge` as a process, uvicorn on loopback, mosquitto,
  nginx, ffmpeg, an engine's worker process).
- `system`: the full system: virtual environments and pip, a real Triton, a browser, containers, toolchains.
- `minutes`: takes minutes on 2 cores, and may start anything; left out of every tier (`deploy/platform-check
  conversions` runs them).

The guard reads Python's audit events (PEP 578) while a test is set up, runs and is torn down: a test that starts a
process or opens a network socket above its tier fails with the line that says which marker it needs. It cannot be
turned off from inside a test; EDGE_TIER_RECORD=FILE writes what each test started instead, with the CPU it took
(one JSON line each, FILE.<worker>).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

TIERS = ("inprocess", "process", "system")
MARKERS = {
    "process": "starts one server or subprocess (`edge` as a process, uvicorn on loopback, a broker, ffmpeg, an "
    "engine's worker): run by the README's test command, not by a plain `pytest`",
    "system": "starts the full system (a venv and pip, a real Triton, a browser, a container, a toolchain): run by "
    "the README's test command, not by a plain `pytest`",
}
# A child process whose command line holds one of these belongs to the full-system tier.
SYSTEM_COMMANDS = (
    "-m venv",
    " venv ",
    "pip install",
    "-m pip",
    "ensurepip",
    "chromium",
    "chrome",
    "playwright",
    "podman",
    "docker",
    "qemu",
    "debootstrap",
    "chroot",
    "pytriton",
    "tritonserver",
    "mlserver",
    "toolchain",
)
NETWORK_FAMILIES = (socket.AF_INET, socket.AF_INET6)


def tier_of_command(command: str) -> str:
    text = f" {command} "
    return "system" if any(word in text for word in SYSTEM_COMMANDS) else "process"


@dataclass
class Watch:
    """What the running test started: (tier, what) pairs, from any thread of this process."""

    nodeid: str | None = None
    seen: list[tuple[str, str]] = field(default_factory=list)
    cpu_at_start: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, tier: str, what: str) -> None:
        with self.lock:
            if self.nodeid is not None and len(self.seen) < 50:
                self.seen.append((tier, what))


WATCH = Watch()


def _command(args: Any) -> str:
    if isinstance(args, (list, tuple)):
        return " ".join(str(part) for part in args)
    return str(args)


PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn"})
OTHER_PROCESS_EVENTS = frozenset({"os.fork", "os.forkpty", "os.system", "pty.spawn"})
SOCKET_EVENTS = frozenset({"socket.bind", "socket.connect"})
WATCHED_EVENTS = PROCESS_EVENTS | OTHER_PROCESS_EVENTS | SOCKET_EVENTS


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Called for every audited event of the process (each open, import, exec...): the cheap test first.
    if event not in WATCHED_EVENTS or WATCH.nodeid is None:
        return
    if event in PROCESS_EVENTS:
        command = _command(args[1])
        WATCH.add(tier_of_command(command), f"a process: {command[:160]}")
    elif event in OTHER_PROCESS_EVENTS:
        WATCH.add("process", f"a process ({event})")
    else:
        sock = args[0]
        if getattr(sock, "family", None) in NETWORK_FAMILIES:
            WATCH.add("process", f"a network socket ({event} {args[1]!r})")


@contextlib.contextmanager
def session_setup() -> Iterator[None]:
    """What a session fixture starts for the tiers that run (engines timed for `auto`) belongs to no one test."""
    with WATCH.lock:
        nodeid, WATCH.nodeid = WATCH.nodeid, None
    try:
        yield
    finally:
        with WATCH.lock:
            WATCH.nodeid = nodeid


def _cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_installed: list[bool] = []


def _install() -> None:
    if not _installed:  # audit hooks cannot be removed: one per process, switched by WATCH.nodeid
        sys.addaudithook(_audit)
        _installed.append(True)


def allowed_tier(item: pytest.Item) -> str:
    if item.get_closest_marker("system") or item.get_closest_marker("minutes"):  # a minutes-long one: anything
        return "system"
    if item.get_closest_marker("process"):
        return "process"
    return "inprocess"


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    _install()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    with WATCH.lock:
        WATCH.nodeid, WATCH.seen, WATCH.cpu_at_start = item.nodeid, [], _cpu_s()
    try:
        yield
    finally:
        with WATCH.lock:
            WATCH.nodeid = None
        _record(item)


def _record(item: pytest.Item) -> None:
    path = os.environ.get("EDGE_TIER_RECORD")
    if not path:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    line = {
        "test": item.nodeid,
        "tier": allowed_tier(item),
        "cpu_s": round(_cpu_s() - WATCH.cpu_at_start, 2),  # its own and its reaped children's, as the kernel counts
        "seen": sorted({f"{t}: {w}" for t, w in WATCH.seen}),
    }
    with Path(f"{path}.{worker}").open("a") as out:
        out.write(json.dumps(line) + "\n")


def violations(item: pytest.Item, seen: list[tuple[str, str]]) -> list[str]:
    rank = TIERS.index(allowed_tier(item))
    return [f"{what} ({tier} tier)" for tier, what in seen if TIERS.index(tier) > rank]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    if os.environ.get("EDGE_TIER_RECORD") or call.when != "teardown":
        return
    with WATCH.lock:
        seen = list(WATCH.seen)
    found = violations(item, seen)
    report = outcome.get_result()
    if found and report.passed:
        needed = max((tier for tier, _ in seen), key=TIERS.index)
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} started {found[0]}"
            + (f" and {len(found) - 1} more" if len(found) > 1 else "")
            + f" without its tier's marker: add @pytest.mark.{needed} (tests/tiers.py says what each tier may start)"
        )


class TierCounts:
    """Each tier's outcomes as the run reports them (also from xdist's workers): printed at the end."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = {tier: {} for tier in TIERS}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or (report.when == "setup" and not report.passed):
            outcome = "error" if report.when == "setup" and report.failed else report.outcome
        elif report.when == "teardown" and report.failed:
            outcome = "error"  # the guard's verdict lands here
        else:
            return
        tier = next((t for t in ("system", "process") if t in report.keywords), "inprocess")
        self.counts[tier][outcome] = self.counts[tier].get(outcome, 0) + 1

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        parts = []
        for tier in TIERS:
            counts = self.counts[tier]
            if counts:
                parts.append(f"{tier} " + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())))
        if parts:
            terminalreporter.write_line("tiers: " + "; ".join(parts))


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controller, or a run without xdist
        session.config.pluginmanager.register(TierCounts(), "edge-tier-counts")
