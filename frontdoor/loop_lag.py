"""Tells when the front door's event loop itself is the queue: past its capacity, requests wait to be
read and parsed before any lane sees them, so a lane's own queue delay (frontdoor/queue_delay.py) stays
short while every answer is seconds late.

A task asks to wake every `PERIOD_S` and notes how late it woke: that lateness is what any callback
ready at the same moment waited, a request's bytes among them. When every wake-up in the last
`interval_s` was later than `target_s` (so more than one: a single long block is a burst), the loop is
standing past its target, and the general lane
refuses new requests at once (a 503 costs the loop far less than a job) until a wake-up is on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

PERIOD_S = 0.02


class LoopLag:
    """How late the event loop runs what is ready, and whether that lateness has become standing."""

    def __init__(
        self, target_s: float, interval_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.target_s = target_s
        self.interval_s = interval_s
        self._clock = clock
        self._late_since: float | None = None  # since when every wake-up was late
        self._task: asyncio.Task[None] | None = None

    def observe(self, lag_s: float) -> None:
        """One wake-up, `lag_s` late."""
        if lag_s <= self.target_s:
            if self._late_since is not None:
                log.info("the event loop is on time again")
            self._late_since = None
        elif self._late_since is None:
            # From this wake-up, not from when it was due: one long block (a burst of a thousand requests
            # parsed in one go) is a single late wake-up, and a burst is served, never refused.
            self._late_since = self._clock()
            log.warning("the event loop runs %.0f ms late", lag_s * 1000)

    def standing(self) -> bool:
        """Whether the loop has been late past the target for a whole interval."""
        return self._late_since is not None and self._clock() - self._late_since >= self.interval_s

    def start(self) -> None:
        """Starts watching the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="loop-lag")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        while True:
            due = self._clock() + PERIOD_S
            await asyncio.sleep(PERIOD_S)
            self.observe(max(0.0, self._clock() - due))
