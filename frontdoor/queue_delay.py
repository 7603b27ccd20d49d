"""Tells a standing queue from a burst by how long requests wait for a thread, as CoDel does for packets
(Nichols and Jacobson, "Controlling Queue Delay", ACM Queue 2012).

A count of requests waiting cannot: a thousand submissions sent at once wait a moment and are served,
while a steady offer above capacity keeps a queue whose every request waits, and grows until clients
time out. So a lane notes how long each request waited before its thread took it. When every request
that started in the last `interval_s` had waited more than `target_s`, the queue is standing: the lane
refuses new requests at once (503 with Retry-After, nothing done) until one starts within the target
or nothing waits at all. Those already admitted are served, so a burst admitted at once is never cut.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class Ticket:
    """One request's place in the queue: it ends once, started or abandoned, whichever comes first."""

    queued_at: float
    ended: bool = False


class QueueDelay:
    """What requests of one lane waited for a thread, and whether that wait has become a standing queue."""

    def __init__(
        self, target_s: float, interval_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.target_s = target_s
        self.interval_s = interval_s
        self._clock = clock
        self._waiting = 0
        self._late_since: float | None = None  # since when every request that started waited too long
        self._lock = threading.Lock()  # started() runs on the lane's threads, the rest on the event loop

    def queued(self) -> Ticket:
        """A request now waits for a thread."""
        with self._lock:
            self._waiting += 1
        return Ticket(self._clock())

    def started(self, ticket: Ticket) -> None:
        """The request has its thread."""
        now = self._clock()
        with self._lock:
            if ticket.ended:
                return
            ticket.ended = True
            self._waiting -= 1
            if now - ticket.queued_at <= self.target_s or self._waiting == 0:
                self._late_since = None  # on time, or the queue emptied: what was late is history
            elif self._late_since is None:
                self._late_since = now

    def abandoned(self, ticket: Ticket) -> None:
        """The request leaves the queue without a thread (its client left, the server stops); harmless
        after it started."""
        with self._lock:
            if not ticket.ended:
                ticket.ended = True
                self._waiting -= 1
                if self._waiting == 0:
                    self._late_since = None

    def standing(self) -> bool:
        """Whether requests have waited past the target for a whole interval, and some still wait."""
        with self._lock:
            if self._waiting <= 0:
                self._late_since = None
                return False
            return self._late_since is not None and self._clock() - self._late_since >= self.interval_s
