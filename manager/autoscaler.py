"""The autoscaler's loop: one leader among the managers reads the load, asks the policy, sets capacity.

Thin on purpose: the decisions live in `autoscaling.py`, the capacity in `providers/`. The loop outlives
any failure of its provider or of Redis (an ECS API error, missing credentials, a timeout): each is
logged, counted in `synapse_autoscaler_errors_total{kind}` and retried with backoff. `alive()` says
whether it still goes round; the manager's `/healthz` answers with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import Callable

from contract.jobs import Priority, now_ms
from contract.keys import CONSUMER_GROUP, LEADER_KEY, stream_key, wake_key
from contract.redis_client import STORE_ERRORS, AsyncRedis
from contract.settings import Settings
from contract.time_limit import stop, within
from contract.workers import WorkerState
from manager import metrics
from manager.autoscaling import Autoscaler, LoadSnapshot, ScaleDecision, ScalingLimits
from manager.fleet import Fleet
from manager.providers import CapacityProvider

log = logging.getLogger(__name__)

TICK_S = 1.0
LEASE_MS = 10_000
MAX_BACKOFF_S = 30.0  # failing iterations retry after 2, 4, 8 ... ticks, never less often than this
ITERATION_TIMEOUT_S = 30.0  # an iteration stuck on its provider (an ECS call) is abandoned and retried
# Past this without a round, the loop counts as stopped: a stuck iteration plus the longest backoff,
# with room to spare, so only a dead loop (or a frozen event loop) fails the health check.
STALE_AFTER_S = ITERATION_TIMEOUT_S + MAX_BACKOFF_S + 10.0

# Take or keep the lease only if it is free or already ours.
_LEAD = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""


def retry_delay_s(failures: int) -> float:
    """The pause before the next round: a tick, doubled for each failure in a row, up to MAX_BACKOFF_S."""
    if failures <= 0:
        return TICK_S
    return min(MAX_BACKOFF_S, TICK_S * 2.0 ** min(failures, 32))


# A continuous-batching engine on the CPU uses every core torch gives it: two engines on the same cores
# split them and each batches less. Local workers share one machine, so the local provider runs one
# engine per this many cores (at least one); on AWS each worker has a GPU of its own.
LOCAL_CORES_PER_ENGINE = 4


def local_engine_workers(cores: int | None = None) -> int:
    return max(1, (cores or os.cpu_count() or 1) // LOCAL_CORES_PER_ENGINE)


def limits_from(settings: Settings) -> ScalingLimits:
    engines = local_engine_workers() if settings.worker_provider == "local" else settings.max_workers
    return ScalingLimits(
        min_workers=settings.min_workers,
        max_workers=settings.max_workers,
        latency_budget_s=settings.latency_budget_ms / 1000,
        scale_to_zero_after_s=settings.scale_to_zero_after,
        scale_down_cooldown_s=settings.scale_down_cooldown_s,
        max_engine_workers=min(settings.max_workers, engines),
    )


SequenceLoad = Callable[[str], "tuple[int, int] | None"]


class AutoscalerLoop:
    def __init__(
        self,
        redis: AsyncRedis,
        settings: Settings,
        *,
        provider: CapacityProvider,
        fleet: Fleet,
        local_backlog: Callable[[str], int],
        sequences: SequenceLoad,
        identity: str,
    ) -> None:
        self._redis = redis
        self._models = settings.models
        self._provider = provider
        self._fleet = fleet
        self._local_backlog = local_backlog
        self._sequences = sequences
        self._identity = identity
        self._policy = Autoscaler(limits_from(settings))
        self._lead = redis.register_script(_LEAD)  # type: ignore[misc]  # typed for Redis alone; runs on a cluster
        self._last_job_at: float | None = None
        # Remembered like the last job: a wake key lives 60 s, while a start from zero on AWS takes
        # minutes, and a pool must not go back to zero once the key is gone.
        self._woken_at: float | None = None
        self._busy_mark = (time.monotonic(), 0.0)
        self.last_decision: ScaleDecision | None = None
        self.desired: int | None = None  # what it last asked the provider for; None when not leading
        self._task: asyncio.Task[None] | None = None
        self.last_round = time.monotonic()  # when the loop last finished a round, well or not
        self.failures = 0  # rounds failed in a row

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="autoscaler")
        self._task.add_done_callback(_report_end)

    def alive(self) -> bool:
        """Whether the loop still goes round (read from the metrics server's thread for /healthz)."""
        ended = self._task is not None and self._task.done()
        return not ended and time.monotonic() - self.last_round < STALE_AFTER_S

    async def _run(self) -> None:
        while True:
            try:
                await within(ITERATION_TIMEOUT_S, self._round())
                self.failures = 0
            except Exception as exc:  # whatever the provider raises (botocore included): never end the loop
                self._failed(exc)
            self.last_round = time.monotonic()
            metrics.AUTOSCALER_LAST_TICK.set_to_current_time()
            await asyncio.sleep(retry_delay_s(self.failures))

    async def _round(self) -> None:
        if await self._lead(keys=[LEADER_KEY], args=[self._identity, LEASE_MS]):
            await self.tick()

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        kind = type(exc).__name__
        metrics.AUTOSCALER_ERRORS.labels(kind).inc()
        log.warning(
            "autoscaler round failed (%d in a row), next in %.0f s: %s: %s", self.failures,
            retry_delay_s(self.failures), kind, exc, exc_info=exc if self.failures == 1 else None,
        )  # fmt: skip

    async def tick(self) -> ScaleDecision:
        load = await self.snapshot()
        capacity = await self._provider.capacity()
        decision = self._policy.decide(load, capacity.desired)
        if decision.desired != capacity.desired:
            log.info("scale %d -> %d: %s", capacity.desired, decision.desired, decision.reason)
        # Every tick, not only on a change: providers use it to replace dead workers and keep warm pools.
        await self._provider.set_desired(decision.desired)
        self.desired = decision.desired
        self.last_decision = decision
        return decision

    async def snapshot(self) -> LoadSnapshot:
        """Backlog = interactive entries no manager has read yet (the group's lag) + what this manager
        holds unstarted.

        Batch jobs count apart, from their stream alone: every entry in it is a batch job not yet ended,
        whichever manager holds it, and the oldest has the earliest deadline (one timeout for all is the
        common case; a shorter one further back is seen once the entries ahead of it end).
        A generative model's jobs count apart: waiting plus running sequences over its per-worker budget
        (`sequences(model)` gives running and budget, None for a one-shot model or one not yet seen).
        A model's wake (`keys.wake_key`, the time a `/v1` call found no READY worker) is dated on this
        loop's clock.
        """
        pipe = self._redis.pipeline(transaction=False)
        for model in self._models:
            pipe.xlen(stream_key(model))
            pipe.xinfo_groups(stream_key(model))
            pipe.get(wake_key(model))
            pipe.xlen(stream_key(model, Priority.BATCH))
            pipe.xrange(stream_key(model, Priority.BATCH), count=1)
        replies = await pipe.execute(raise_on_error=False)
        batch, batch_due_ms = _batch_load(replies[3::5], replies[4::5])
        queued, backlog, engines = batch, 0, 0.0
        for model, length, groups in zip(self._models, replies[0::5], replies[1::5], strict=True):
            if isinstance(length, int):
                queued += length
            lag = sum(
                int(group.get("lag") or 0)
                for group in (groups if isinstance(groups, list) else ())
                if group.get("name") == CONSUMER_GROUP
            )
            waiting = lag + self._local_backlog(model)
            sequences = self._sequences(model)
            if sequences is None:
                backlog += waiting
            else:
                running, budget = sequences
                engines += (waiting + running) / budget
        now = time.monotonic()
        if queued > 0:  # stream entries exist until their outcome is written: work somewhere
            self._last_job_at = now
        woken = woken_at(now, replies[2::5])
        if woken is not None and (self._woken_at is None or woken > self._woken_at):
            self._woken_at = woken
        slots = list(self._fleet.workers.values())
        return LoadSnapshot(
            now=now,
            backlog=backlog,
            running=sum(1 for s in slots if s.info.state is WorkerState.READY),
            throughput=self._fleet.throughput(),
            busy_ratio=self._busy_ratio(now, len(slots)),
            last_job_at=self._last_job_at,
            engine_workers=math.ceil(engines),
            woken_at=self._woken_at,
            batch_backlog=batch,
            batch_due_s=None if batch_due_ms is None else (batch_due_ms - now_ms()) / 1000,
        )

    def _busy_ratio(self, now: float, workers: int) -> float:
        busy = self._fleet.busy_seconds()
        then, busy_then = self._busy_mark
        self._busy_mark = (now, busy)
        wall = (now - then) * max(1, workers)
        return min(1.0, max(0.0, (busy - busy_then) / wall)) if wall > 0 else 0.0

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.remove_done_callback(_report_end)
            await stop(self._task)  # a retrying loop: a cancel it takes for a failure is sent again
        self.desired = None
        with contextlib.suppress(*STORE_ERRORS):
            if await self._redis.get(LEADER_KEY) == self._identity:
                await self._redis.delete(LEADER_KEY)
        await self._provider.aclose()


def woken_at(now: float, wakes: list[object]) -> float | None:
    """The latest wake (wall-clock ms, as the front door writes it) on the monotonic clock of `now`."""
    stamps = [int(w) for w in wakes if isinstance(w, str) and w.isdigit()]
    if not stamps:
        return None
    return now - max(0.0, (now_ms() - max(stamps)) / 1000)


def _batch_load(lengths: list[object], firsts: list[object]) -> tuple[int, int | None]:
    """Batch jobs not yet ended, over the models' batch streams, and the earliest deadline (wall-clock
    ms) among their oldest entries; replies that failed count as none."""
    count = sum(length for length in lengths if isinstance(length, int))
    deadlines = [
        int(entries[0][1]["deadline_ms"])
        for entries in firsts
        if isinstance(entries, list) and entries and "deadline_ms" in entries[0][1]
    ]
    return count, min(deadlines, default=None)


def _report_end(task: asyncio.Task[None]) -> None:
    """The loop ends only on cancellation; anything else must not go unnoticed (/healthz fails too)."""
    if not task.cancelled():
        log.critical("the autoscaler loop ended: %r", task.exception())
