"""The streaming server's lanes: each kind of request runs on threads of its own, and a lane admits a
bounded number of requests, so no queue grows without end behind a busy lane.

- `general`: submissions, reads, and the submit of a stream, on `SYNAPSE_GATEWAY_CONCURRENCY` threads,
  with room for `SYNAPSE_GATEWAY_QUEUE` more waiting for one (a burst of a thousand submissions is
  served, not refused). Past both a request is answered 503 `overloaded` at once: an unbounded queue
  in front of busy threads makes every answer late (offered twice its capacity, the gateway once
  answered almost nothing for 40 s). So is one that comes while the queue stands: every request
  that got a thread in the last second had waited more than `SYNAPSE_GATEWAY_QUEUE_DELAY_MS` for it
  (frontdoor/queue_delay.py); or while the event loop itself runs that late past an allowance of five
  seconds of lateness, earned back while it is on time (frontdoor/loop_lag.py): past its capacity the
  loop is where requests wait, unseen by any lane (offered twice its capacity, the gateway answered
  every job, at a median of 14 s).
- `waits`: requests that wait on a job (`?wait=`, synchronous `/v1`), in fair shares: a tenant past
  `SYNAPSE_GATEWAY_LONG_WAITS_PER_TENANT` gets 429, anyone past `SYNAPSE_GATEWAY_LONG_WAITS` 503. One
  tenant's 3,000 polls once kept another's half-second poll waiting 24.6 s in a shared FIFO. A
  synchronous call holds its thread while it waits; a long-poll holds its place in the lane but no
  thread (frontdoor/job_waits.py).
- `cancels`: a cancel waits a moment for its job to stop, never behind long-polls
  (`SYNAPSE_GATEWAY_CANCELS`).

Every refusal comes before the handler runs: nothing was submitted, read or cancelled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from contract.settings import Settings
from frontdoor.fair_pool import FairPool
from frontdoor.loop_lag import LoopLag
from frontdoor.queue_delay import QueueDelay
from frontdoor.shares import Refusals, Shares
from openai_api.errors import Problem

LaneName = Literal["general", "waits", "cancels"]
Result = TypeVar("Result")

# A general request takes milliseconds, so a second finds threads free again; a long-poll holds its
# thread up to SYNAPSE_MAX_WAIT_POLL_S, so a tenant at its share retries a little later.
BUSY_RETRY_AFTER_S = 1
WAITS_RETRY_AFTER_S = 2
# How long requests must all have waited past the target before the lane refuses: longer than a burst
# of a thousand submissions takes to drain, so such a burst is served (README's guarantees).
STANDING_QUEUE_S = 1.0
# Threads for a long-poll's reads before and after its wait (the wait itself holds none: frontdoor/
# job_waits.py). Each read is a millisecond or two of CPU under the GIL, which the event loop's thread
# needs too: 3,000 polls whose reads ran on 250 threads kept another tenant's poll waiting 1.3 s, on 16
# 1.0 s, on 4 0.85-0.9 s; 2 were no better (bench tenant-burst, the poll's own 0.5 s wait included).
QUICK_THREADS = 4
# How long the event loop may run late from idle before the lane refuses (frontdoor/loop_lag.py): more
# than a burst of a thousand submissions keeps it late while the loop reads them (up to 3.4 s seen on 2
# cores; with a plain one-second interval, some such bursts had hundreds refused), so such a burst is served.
LOOP_LATENESS_ALLOWANCE_S = 5.0


def _busy(why: str) -> Problem:
    """503 `overloaded`: the front door is past what it serves; nothing was done."""
    message = f"{why}; nothing was done; retry after {BUSY_RETRY_AFTER_S} s"
    return Problem(503, "overloaded", message, headers={"Retry-After": str(BUSY_RETRY_AFTER_S)})


def _overloaded(setting: str, what: str) -> Callable[[int], Problem]:
    def full(capacity: int) -> Problem:
        return _busy(f"this front door holds {capacity} {what} at once ({setting}) and all are taken")

    return full


def _queue_standing(delay: QueueDelay) -> Problem:
    return _busy(
        f"requests to this front door have waited over {delay.target_s * 1000:.0f} ms for a thread for "
        f"{delay.interval_s:g} s (SYNAPSE_GATEWAY_QUEUE_DELAY_MS): it is past its capacity"
    )


def _loop_standing(lag: LoopLag) -> Problem:
    return _busy(
        f"this front door's event loop has run over {lag.target_s * 1000:.0f} ms late for longer than its "
        f"{lag.allowance_s:g} s allowance (SYNAPSE_GATEWAY_QUEUE_DELAY_MS): it is past its capacity"
    )


def _too_many_waits(tenant: str, share: int) -> Problem:
    message = (
        f"tenant {tenant!r} holds its {share} requests waiting on a job on this front door "
        f"(SYNAPSE_GATEWAY_LONG_WAITS_PER_TENANT); nothing was done; retry after one of them ends, or "
        f"poll without wait"
    )
    return Problem(429, "too_many_waits", message, headers={"Retry-After": str(WAITS_RETRY_AFTER_S)})


def _waits_full(capacity: int) -> Problem:
    message = (
        f"this front door holds {capacity} requests waiting on a job (SYNAPSE_GATEWAY_LONG_WAITS) and "
        f"all are taken; nothing was done; retry"
    )
    return Problem(503, "waits_full", message, headers={"Retry-After": str(WAITS_RETRY_AFTER_S)})


class Lane(Shares):
    """Threads for one kind of request, and the count of what each tenant holds of them."""

    def __init__(
        self,
        name: LaneName,
        capacity: int,
        per_tenant: int,
        refusals: Refusals,
        *,
        threads: str,
        workers: int | None = None,
        quick_workers: int | None = None,
        delay: QueueDelay | None = None,
        loop_lag: LoopLag | None = None,
    ) -> None:
        """`capacity` requests admitted at once, on `workers` threads (default: one each), and the
        lane's work that never blocks for long on `quick_workers` of their own (default: the same); with
        `delay`, none while the wait for a thread stands past its target; with `loop_lag`, none while the
        event loop runs late past its allowance."""
        super().__init__(capacity, per_tenant, refusals)
        self.name = name
        self._pool = FairPool(max_workers=workers or capacity, thread_name_prefix=threads)
        self._quick = self._pool
        if quick_workers is not None:
            self._quick = FairPool(max_workers=quick_workers, thread_name_prefix=f"{threads}-quick")
        self._delay = delay
        self._loop_lag = loop_lag

    def take(self, tenant: str) -> Problem | None:
        if self._delay is not None and self._delay.standing():
            return _queue_standing(self._delay)
        if self._loop_lag is not None and self._loop_lag.standing():
            return _loop_standing(self._loop_lag)
        return super().take(tenant)

    async def run(
        self, tenant: str, func: Callable[..., Result], *args: object, quick: bool = False
    ) -> Result:
        """Runs `func` on one of the lane's threads (taken already with `take`), the tenant's turn
        among the work waiting for one (frontdoor/fair_pool.py); `quick`: on the threads for work that
        never blocks for long."""
        pool = self._quick if quick else self._pool
        delay = self._delay
        if delay is None:
            return await asyncio.wrap_future(pool.submit(tenant, func, *args))
        ticket = delay.queued()

        def on_thread() -> Result:
            delay.started(ticket)
            return func(*args)

        try:
            return await asyncio.wrap_future(pool.submit(tenant, on_thread))
        finally:
            delay.abandoned(ticket)  # nothing if it started

    def shutdown(self) -> None:
        self._pool.shutdown()
        self._quick.shutdown()


@dataclass(frozen=True, slots=True)
class Lanes:
    general: Lane
    waits: Lane
    cancels: Lane
    loop_lag: LoopLag

    @classmethod
    def of(cls, settings: Settings, clock: Callable[[], float] = time.monotonic) -> Lanes:
        threads = settings.gateway_concurrency
        busy = threads + settings.gateway_queue
        cancels = settings.gateway_cancels
        setting = "SYNAPSE_GATEWAY_CONCURRENCY + SYNAPSE_GATEWAY_QUEUE"
        busy_full = _overloaded(setting, "requests")
        cancels_full = _overloaded("SYNAPSE_GATEWAY_CANCELS", "cancels")
        waits = Refusals(_waits_full, _too_many_waits)
        share = settings.gateway_long_waits_per_tenant
        target_s = settings.gateway_queue_delay_ms / 1000
        delay = QueueDelay(target_s, STANDING_QUEUE_S, clock)
        loop_lag = LoopLag(target_s, LOOP_LATENESS_ALLOWANCE_S, clock)
        general = Lane(
            "general", busy, busy, Refusals(busy_full), threads="lambda", workers=threads, delay=delay,
            loop_lag=loop_lag,
        )  # fmt: skip
        return cls(
            loop_lag=loop_lag,
            general=general,
            waits=Lane(
                "waits",
                settings.gateway_long_waits,
                share,
                waits,
                threads="lambda-wait",
                quick_workers=QUICK_THREADS,
            ),
            cancels=Lane("cancels", cancels, cancels, Refusals(cancels_full), threads="lambda-cancel"),
        )

    def named(self, name: LaneName) -> Lane:
        return {"general": self.general, "waits": self.waits, "cancels": self.cancels}[name]

    def start(self) -> None:
        """Starts watching the running event loop's lateness."""
        self.loop_lag.start()

    async def aclose(self) -> None:
        await self.loop_lag.aclose()
        for lane in (self.general, self.waits, self.cancels):
            lane.shutdown()
