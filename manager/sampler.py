"""Samples what only shows up by looking, once a second, and publishes it as metrics.

Redis holds what the front door did (it is a Lambda, with no /metrics of its own): submissions are
the streams' entries-added, rejections and requests (with their billed duration) hashes it counts
into; and the counts hash, what every tenant's jobs came to and the cancellations by model (the front
door's and every manager's alike). The registry holds the pool. From the pool and the clock the
sampler also accrues worker time and wall time for the cost ledger, which prices the front door's
requests too; and when a worker leaves the pool without deleting its Pushgateway group (it crashed),
the sampler deletes the group.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import delete_from_gateway

from contract.jobs import Priority
from contract.keys import CONSUMER_GROUP, COUNTS_KEY, REJECTIONS_KEY, REQUESTS_KEY, stream_key
from contract.metric_families import WORKER_PUSH_JOB
from contract.redis_client import STORE_ERRORS, AsyncRedis
from contract.time_limit import stop
from manager import metrics
from manager.cost import CostLedger
from manager.fleet import Fleet

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 1.0
PUSHGATEWAY_TIMEOUT_S = 2.0
TENANT_EVENTS = ("submitted", "completed", "failed", "cancelled")
REJECTED = "rejected:"


def group_counts(groups: Any) -> tuple[int, int | None]:
    """(pending, entries-added) of the managers' group from XINFO GROUPS; entries-added is None
    when Redis cannot tell (its lag is unknown)."""
    for group in groups or ():
        if group.get("name") == CONSUMER_GROUP:
            lag, read = group.get("lag"), group.get("entries-read")
            if read is None and group.get("last-delivered-id") == "0-0":
                read = 0  # a group that has read nothing yet names no count
            added = None if lag is None or read is None else int(read) + int(lag)
            return int(group.get("pending") or 0), added
    return 0, None


def stream_reading(length: Any, groups: Any) -> tuple[int, int | None]:
    """(unread, entries-added) of one stream from its XLEN and XINFO GROUPS replies. An error reply (a
    stream not created yet, or Redis failing a moment) says nothing about what was added: None, so
    that the last count stands and the counter never seems to go back."""
    if isinstance(length, Exception) or isinstance(groups, Exception):
        return 0, None
    pending, added = group_counts(groups)
    return max(0, int(length) - pending), added


def front_door_usage(fields: Mapping[str, str]) -> metrics.FrontDoorUsage:
    """The requests hash (`<route>:count`, `<route>:ms`) as counts and seconds by route."""
    requests: dict[str, int] = {}
    seconds: dict[str, float] = {}
    for name, value in fields.items():
        route, _, unit = name.rpartition(":")
        if unit == "count":
            requests[route] = int(value)
        elif unit == "ms":
            seconds[route] = int(value) / 1000
    return metrics.FrontDoorUsage(requests, seconds)


class TenantCounts:
    """Reads the counts hash into the exported counts, with the tenant label bounded.

    Which tenants keep their name is decided once per tenant and never revisited, so that no series
    ever goes down: at the first reading the TENANT_SERIES tenants with the most submissions, after it
    each newcomer while there is room; the rest add up under `other`, and stay there. Moving a tenant
    out of `other` would lower it (a counter reset to Prometheus); moving one in would end the tenant's
    series and add its whole history to `other` at once. Each manager decides from the same hash, so
    they agree until there are more tenants than names; past that, managers started at different times
    may name different ones, and only `other` (aggregated with max) can then include a tenant that
    another manager names. A tenant called `other` is always folded.
    """

    def __init__(self, models: Sequence[str], limit: int = metrics.TENANT_SERIES) -> None:
        self._models = list(models)
        self._limit = limit
        self._named: set[str] = set()

    def read(self, fields: Mapping[str, str]) -> metrics.FleetCounts:
        cancelled = dict.fromkeys(self._models, 0)  # "none cancelled" is a 0, not a gap
        tenants: dict[str, dict[str, int]] = {}
        for name, value in fields.items():
            parts = name.split("|")
            if len(parts) == 3 and parts[0] == "model" and parts[2] == "cancelled":
                cancelled[parts[1]] = int(value)
            elif len(parts) == 2:
                tenants.setdefault(parts[0], {})[parts[1]] = int(value)
        self._name_newcomers(tenants)
        labels = [*sorted(self._named), metrics.OTHER_TENANT]
        jobs = {(tenant, event): 0 for tenant in labels for event in TENANT_EVENTS}
        rejections: dict[tuple[str, str], int] = {}
        for tenant, events in tenants.items():
            label = tenant if tenant in self._named else metrics.OTHER_TENANT
            for event, count in events.items():
                if event in TENANT_EVENTS:
                    jobs[label, event] += count
                elif event.startswith(REJECTED):
                    reason = (label, event.removeprefix(REJECTED))
                    rejections[reason] = rejections.get(reason, 0) + count
        return metrics.FleetCounts(cancelled, jobs, rejections)

    def _name_newcomers(self, tenants: Mapping[str, Mapping[str, int]]) -> None:
        """Room only ever shrinks, so a tenant left in `other` here is never named later."""
        newcomers = sorted(
            (t for t in tenants if t not in self._named and t != metrics.OTHER_TENANT),
            key=lambda t: (-tenants[t].get("submitted", 0), t),
        )
        self._named.update(newcomers[: max(0, self._limit - len(self._named))])


class MetricsSampler:
    """`start()` runs the sampling loop; `aclose()` stops it."""

    def __init__(
        self,
        redis: AsyncRedis,
        fleet: Fleet,
        models: Sequence[str],
        backlog: Callable[[str], int],
        *,
        generative: Callable[[str], bool] = lambda model: False,
        costs: CostLedger,
        desired: Callable[[], int | None],
        pushgateway_url: str,
        interval_s: float = SAMPLE_INTERVAL_S,
    ) -> None:
        self._redis = redis
        self._fleet = fleet
        self._costs = costs
        self._desired = desired
        self._models = list(models)
        self._backlog = backlog
        self._generative = generative
        self._pushgateway_url = pushgateway_url
        self._interval_s = interval_s
        self._submitted: dict[str, int] = {}
        self._added: dict[tuple[str, str], int] = {}  # entries-added of each (model, priority) stream
        self._rejected: dict[str, int] = {}
        self._usage = metrics.FrontDoorUsage()
        self._tenant_counts = TenantCounts(models)
        self._counts = self._tenant_counts.read({})
        self._workers: set[str] = set()
        self._last: float | None = None
        self._failing = False
        self._task: asyncio.Task[None] | None = None
        self._deletes: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.sample()
        self._task = asyncio.create_task(self._loop(), name="metrics-sampler")

    async def aclose(self) -> None:
        for task in [self._task, *self._deletes]:
            await stop(task)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await self.sample()

    async def sample(self) -> None:
        now = time.monotonic()
        self._sample_fleet(now)
        try:
            await self._sample_redis()
            if self._failing:
                log.info("metrics sampling reads Redis again")
            self._failing = False
        except STORE_ERRORS as exc:
            if not self._failing:
                log.warning(
                    "metrics sampling cannot read Redis (%s); queue metrics hold their last values", exc
                )
            self._failing = True
        busy, usage, counts = self._fleet.pool.busy, self._usage, self._counts
        metrics.publish(
            metrics.snapshot(
                self._submitted, self._rejected, busy, self._costs, now, usage=usage, counts=counts
            )
        )

    def _sample_fleet(self, now: float) -> None:
        states = [slot.info.state for slot in self._fleet.workers.values()]
        metrics.set_fleet(states, self._desired())
        if self._last is not None:
            self._costs.add_worker_time(now - self._last, len(states))
            self._costs.add_uptime(now - self._last)
        self._last = now
        present = set(self._fleet.workers)
        for worker in present | self._workers:
            metrics.WORKER_SEQUENCES.labels(worker).set(self._fleet.sequences.on_worker(worker))
        for gone in self._workers - present:
            metrics.WORKER_SEQUENCES.remove(gone)
        self._fleet.pool.track(present, now)
        for gone in self._workers - present:
            task = asyncio.create_task(self._delete_group(gone), name=f"pushgateway-delete:{gone}")
            self._deletes.add(task)
            task.add_done_callback(self._deletes.discard)
        self._workers = present

    async def _sample_redis(self) -> None:
        pipe = self._redis.pipeline(transaction=False)
        for model in self._models:
            for priority in Priority:
                pipe.xlen(stream_key(model, priority))
                pipe.xinfo_groups(stream_key(model, priority))
        pipe.hgetall(REJECTIONS_KEY)
        pipe.hgetall(REQUESTS_KEY)
        pipe.hgetall(COUNTS_KEY)
        replies = await pipe.execute(raise_on_error=False)
        self._read_streams(iter(replies))
        rejected, requests, counts = replies[-3:]
        if isinstance(rejected, dict):
            self._rejected = {reason: int(count) for reason, count in rejected.items()}
        if isinstance(requests, dict):
            self._usage = front_door_usage(requests)
            self._costs.read_front_door(
                sum(self._usage.requests.values()), 1000 * sum(self._usage.seconds.values())
            )
        if isinstance(counts, dict):
            self._counts = self._tenant_counts.read(counts)
        self._costs.read_submitted(sum(self._submitted.values()))

    def _read_streams(self, readings: Iterator[Any]) -> None:
        """Per model, an XLEN and XINFO GROUPS reply for each priority's stream, in Priority's order."""
        for model in self._models:
            unread: dict[str, int] = {}
            for priority in Priority:
                unread[priority], added = stream_reading(next(readings), next(readings))
                if added is not None:  # else unknown for now: the stream's last count stands
                    self._added[model, priority] = added
            metrics.set_queue_depth(model, streams=unread, buffer=self._backlog(model))
            if self._generative(model):
                metrics.SEQUENCES.labels(model, "running").set(self._fleet.sequences.total(model))
                metrics.SEQUENCES.labels(model, "waiting").set(sum(unread.values()) + self._backlog(model))
            if any((model, priority) in self._added for priority in Priority):
                self._submitted[model] = sum(self._added.get((model, p), 0) for p in Priority)

    async def _delete_group(self, worker: str) -> None:
        """A crashed worker cannot delete its own group; left alone it would show stale values forever."""
        try:
            await asyncio.to_thread(
                delete_from_gateway,
                self._pushgateway_url,
                job=WORKER_PUSH_JOB,
                grouping_key={"worker": worker},
                timeout=PUSHGATEWAY_TIMEOUT_S,
            )
        except OSError as exc:
            log.debug("could not delete the Pushgateway group of worker %s: %s", worker, exc)
