"""Delivery of stored messages to one destination, in order, at least once.

A sender thread takes the oldest waiting messages, hands them to its destination, and deletes from the outbox
only what the destination confirmed (a broker's PUBACK, a webhook's 2xx). What was not confirmed is tried again,
from the same place, after a backoff; so a broker that is down for an hour gets that hour's events, in order, when
it comes back. A message the destination already holds (paho keeps its unacknowledged QoS 1 messages and sends them
itself after reconnecting) is not sent again by the destination: a consumer sees a duplicate only where QoS 1
itself allows one (an acknowledgement lost on the way back), and removes it by the event id and change.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable

from edge_inference.edge.events.store import EventStore, Message

log = logging.getLogger("edge.outbox")
BATCH = 50
MAX_BACKOFF_S = 30.0

# Delivers messages in order; returns how many of them, from the first, were confirmed.
Deliver = Callable[[list[Message]], int]


class OutboxSender:
    def __init__(self, store: EventStore, sink: str, deliver: Deliver) -> None:
        self.store = store
        self.sink = sink
        store.sinks.add(sink)
        self.deliver = deliver
        self.wake = threading.Event()  # set when messages are queued, or the destination comes back
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"outbox-{sink}", daemon=True)
        self.delivered = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self.wake.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._deliver_until_stopped()
        except sqlite3.ProgrammingError:  # the store closed under a delivery that outlived stop(): kept for next time
            if not self._stop.is_set():
                raise
            log.info("%s: stopped during a delivery; its messages stay in the outbox for the next start", self.sink)

    def _deliver_until_stopped(self) -> None:
        backoff, store_failing = 1.0, False
        while not self._stop.is_set():
            self.wake.clear()
            try:
                confirmed, waiting = self._deliver_batch()
            except sqlite3.OperationalError as exc:  # a full disk: what was sent stays in the outbox, sent again later
                if not store_failing:
                    log.warning("%s: the outbox cannot be updated (%s); delivery waits for the store", self.sink, exc)
                store_failing, confirmed, waiting = True, 0, 1
            else:
                store_failing = False
            if not waiting:
                self.wake.wait(5.0)
                continue
            if confirmed:
                backoff = 1.0
            if confirmed < waiting:
                self.wake.wait(backoff)  # the destination is away: try again later, or when it says it is back
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _deliver_batch(self) -> tuple[int, int]:
        """One batch of the oldest waiting messages: (how many the destination confirmed, how many were sent)."""
        messages = self.store.pending(self.sink, BATCH)
        if not messages:
            return 0, 0
        try:
            confirmed = self.deliver(messages)
        except Exception:  # a destination's bug must not end delivery for good
            log.exception("delivering to %s failed", self.sink)
            confirmed = 0
        if confirmed:
            self.store.delivered(messages[:confirmed])
            self.delivered += confirmed
        return confirmed, len(messages)
