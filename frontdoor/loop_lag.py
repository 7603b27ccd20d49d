"""Tells when the front door's event loop itself is the queue: past its capacity, requests wait to be
read and parsed before any lane sees them, so a lane's own queue delay (frontdoor/queue_delay.py) stays
short while every answer is seconds late.

A task asks to wake every `PERIOD_S` and notes how late it woke: that lateness is what any callback
ready at the same moment waited, a request's bytes among them. A burst and an overload both make it late;
what tells them apart is how long. So lateness is paid for from an allowance, as a token bucket pays for
requests: time the loop runs late spends it, time on time earns it back, up to `allowance_s`. While the
loop is late and the allowance is spent, the loop is standing past its target, and the general lane
refuses new requests at once (a 503 costs the loop far less than a job). A burst of a thousand requests
from an idle loop is read within the allowance and served; a steady overload spends it once, and from
then on each moment on time buys only as much lateness, so refusals resume as soon as the loop falls
behind again instead of after a whole new interval.
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
        self, target_s: float, allowance_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.target_s = target_s
        self.allowance_s = allowance_s
        self._clock = clock
        self._credit = allowance_s  # seconds of lateness the loop may still run before refusals start
        self._seen = clock()
        self._late = False
        self._task: asyncio.Task[None] | None = None

    def observe(self, lag_s: float) -> None:
        """One wake-up, `lag_s` late: the time since the last one was all late, or all on time. A wake-up
        later than the whole allowance is a process that was suspended (a frozen Lambda environment, a
        laptop asleep, SIGSTOP), not a queue: it neither spends nor earns."""
        now = self._clock()
        elapsed, self._seen = now - self._seen, now
        if lag_s > self.allowance_s:
            log.info("the event loop woke %.1f s late: the process was suspended, not busy", lag_s)
            self._late = False
            return
        late = lag_s > self.target_s
        if late:
            self._credit = max(0.0, self._credit - elapsed)
        else:
            self._credit = min(self.allowance_s, self._credit + elapsed)
        if late != self._late:
            if late:
                log.warning("the event loop runs %.0f ms late", lag_s * 1000)
            else:
                log.info("the event loop is on time again; %.1f s of lateness allowed", self._credit)
        self._late = late

    def standing(self) -> bool:
        """Whether the loop runs late with its allowance spent."""
        return self._late and self._credit <= 0.0

    def start(self) -> None:
        """Starts watching the running loop."""
        self._seen = self._clock()
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
