"""What the manager's sampler exports from the counts the fleet keeps in Redis: every tenant's jobs, a tenant
label that stays bounded and never goes down, cancellations counted once whoever ends the job, and the
jobs waiting in both priorities' streams. The front door's and the manager's own scripts write the counts,
on a plain Redis and on a cluster."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from contract.job_record import JobRecord
from contract.job_store import JobStore
from contract.jobs import Job, JobStatus, Outcome, Priority, now_ms
from contract.keys import COUNTS_KEY
from contract.redis_client import AsyncRedis
from contract.workers import WorkerRegistry
from manager import metrics
from manager.busy import BusyClock
from manager.cost import CostLedger
from manager.fleet import Fleet
from manager.outcomes import cancelled
from manager.queue import Delivery, JobQueue
from manager.sampler import MetricsSampler, TenantCounts
from tests.redis_cluster import LocalRedisCluster, sync_test_client

DATABASE = 8  # apart from the other suites' (0, 1, 3, 4, 5, 7, 9): the counts hash is one per store
JOB_TTL_S = 600


@pytest.fixture(scope="module")
def sampler_cluster(tmp_path_factory: pytest.TempPathFactory, logs: Path) -> Iterator[LocalRedisCluster]:
    """A cluster of its own: these tests own the whole counts hash, which other suites write too."""
    with LocalRedisCluster.running(tmp_path_factory.mktemp("sampler-cluster"), logs) as cluster:
        yield cluster


@pytest.fixture(params=["plain", "cluster"], ids=["redis", "redis-cluster"])
def store_url(request: pytest.FixtureRequest) -> tuple[str, bool]:
    if request.param == "cluster":
        return request.getfixturevalue("sampler_cluster").url, True
    redis_url: str = request.getfixturevalue("redis_url")
    return redis_url.rsplit("/", 1)[0] + f"/{DATABASE}", False


@dataclass
class Fleetwide:
    """A store as the front door writes it, a manager's queue on it, and that manager's sampler."""

    redis: AsyncRedis
    store: JobStore
    queue: JobQueue
    sampler: MetricsSampler
    model: str

    def submit(self, tenant: str, priority: Priority = Priority.INTERACTIVE) -> Job:
        job = Job.new(
            model=self.model, prompt="hello", max_tokens=8, timeout_ms=60_000,
            tenant=tenant, priority=priority,
        )  # fmt: skip
        assert self.store.submit(job)
        return job

    async def end(self, outcomes: list[Outcome], deliveries: list[Delivery]) -> set[str]:
        """What a manager's dispatcher does with a batch's outcomes: write them, count those written."""
        entries = {d.job.id: (d.entry_id, d.job) for d in deliveries}
        written = await self.queue.complete(self.model, outcomes, entries)
        created = {d.job.id: d.job.created_ms for d in deliveries}
        metrics.record_outcomes(self.model, [o for o in outcomes if o.job_id in written], created)
        return written


@pytest.fixture
async def site(store_url: tuple[str, bool]) -> AsyncIterator[Fleetwide]:
    url, cluster = store_url
    client: AsyncRedis = (
        aioredis.RedisCluster.from_url(url, decode_responses=True)
        if cluster
        else aioredis.Redis.from_url(url, decode_responses=True)
    )
    sync = sync_test_client(url, cluster=cluster)
    await client.delete(COUNTS_KEY)
    model = f"model-{uuid.uuid4().hex[:10]}"
    fleet = Fleet.for_triton(WorkerRegistry(client, 2.0), 1.0, 1, BusyClock())
    sampler = MetricsSampler(
        client, fleet, [model, "idle-model"], lambda model: 0, costs=CostLedger(1.0),
        desired=lambda: None, pushgateway_url="http://127.0.0.1:9",
    )  # fmt: skip
    queue = JobQueue(client, "manager-a", JOB_TTL_S)
    await queue.ensure_group(model)
    yield Fleetwide(client, JobStore(sync, JOB_TTL_S, 1000), queue, sampler, model)
    await client.delete(COUNTS_KEY)
    await client.aclose()
    sync.close()


def finished(delivery: Delivery, status: JobStatus = JobStatus.COMPLETED) -> Outcome:
    now = now_ms()
    return Outcome(
        delivery.job.id, status, now, now, 1, error_code="" if status is JobStatus.COMPLETED else "x"
    )


def tenant_jobs() -> dict[str, dict[str, float]]:
    """synapse_tenant_jobs_total as a scrape shows it: tenant -> event -> count."""
    found: dict[str, dict[str, float]] = {}
    for family in REGISTRY.collect():
        if family.name == "synapse_tenant_jobs":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    found.setdefault(sample.labels["tenant"], {})[sample.labels["event"]] = sample.value
    return found


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


async def test_a_tenants_jobs_are_counted_from_submission_to_outcome(site: Fleetwide) -> None:
    for _ in range(3):
        site.submit("acme")
    site.submit("globex")
    deliveries = await site.queue.read(site.model, 10, 100)
    acme = [d for d in deliveries if d.job.tenant == "acme"]

    await site.end([finished(acme[0]), finished(acme[1]), finished(acme[2], JobStatus.FAILED)], acme)
    await site.sampler.sample()

    jobs = tenant_jobs()
    assert jobs["acme"] == {"submitted": 3, "completed": 2, "failed": 1, "cancelled": 0}
    assert jobs["globex"] == {"submitted": 1, "completed": 0, "failed": 0, "cancelled": 0}
    assert jobs["other"] == {"submitted": 0, "completed": 0, "failed": 0, "cancelled": 0}


async def test_past_twenty_tenants_the_rest_add_up_under_other_and_no_series_goes_down(
    site: Fleetwide,
) -> None:
    tenants = [f"tenant-{i:02d}" for i in range(metrics.TENANT_SERIES + 1)]
    for tenant in tenants[:-1]:
        site.submit(tenant)
        site.submit(tenant)
    site.submit(tenants[-1])  # the fewest submissions: the 21st

    await site.sampler.sample()
    first = tenant_jobs()
    assert set(first) == {*tenants[:-1], "other"}
    assert first["other"]["submitted"] == 1

    for _ in range(5):  # the folded tenant becomes the busiest, and a 22nd arrives
        site.submit(tenants[-1])
        site.submit("newcomer")
    await site.sampler.sample()
    later = tenant_jobs()
    assert set(later) == set(first), "the names are kept: no series ends, none starts"
    assert later["other"]["submitted"] == 11
    assert all(later[t][e] >= count for t, events in first.items() for e, count in events.items())


def test_a_tenant_called_other_is_always_folded() -> None:
    counts = TenantCounts([], limit=2).read({"other|submitted": "5", "acme|submitted": "1"})
    assert counts.tenant_jobs["acme", "submitted"] == 1
    assert counts.tenant_jobs["other", "submitted"] == 5
    assert {tenant for tenant, _ in counts.tenant_jobs} == {"acme", "other"}


async def test_rejections_are_counted_by_tenant_and_reason(site: Fleetwide) -> None:
    await site.redis.hincrby(COUNTS_KEY, "acme|rejected:rate_limited", 4)  # type: ignore[misc]
    await site.redis.hincrby(COUNTS_KEY, "acme|rejected:quota_exceeded", 1)  # type: ignore[misc]

    await site.sampler.sample()

    assert value("synapse_tenant_rejections_total", tenant="acme", reason="rate_limited") == 4
    assert value("synapse_tenant_rejections_total", tenant="acme", reason="quota_exceeded") == 1


async def test_a_cancellation_counts_once_whoever_ends_the_job_and_never_as_a_failure(
    site: Fleetwide,
) -> None:
    queued, running, done = site.submit("acme"), site.submit("acme"), site.submit("acme")
    deliveries = await site.queue.read(site.model, 10, 100)  # this manager holds all three
    by_id = {d.job.id: d for d in deliveries}
    await site.queue.mark_running([running, done], now_ms(), "worker-a")
    # The front door cancels the job still QUEUED; the manager stops the RUNNING one itself.
    assert (
        site.store.cancel(JobRecord.of(queued.hash_fields()), "the client asked") is JobStatus.QUEUED
    )  # ended now

    outcomes = [
        finished(by_id[queued.id]),  # its batch ran anyway: the front door's CANCELLED stands
        cancelled(by_id[running.id], "the client asked", now_ms()),
        finished(by_id[done.id]),
    ]
    written = await site.end(outcomes, deliveries)
    await site.sampler.sample()

    assert written == {running.id, done.id}
    assert value("synapse_jobs_cancelled_total", model=site.model) == 2
    assert tenant_jobs()["acme"] == {"submitted": 3, "completed": 1, "failed": 0, "cancelled": 2}
    assert value("synapse_jobs_failed_total", model=site.model, reason="cancelled") is None
    assert value("synapse_jobs_cancelled_total", model="idle-model") == 0, "a 0 from the start, not a gap"


async def test_jobs_waiting_in_both_priorities_streams_are_queue_depth_and_submissions(
    site: Fleetwide,
) -> None:
    for _ in range(2):
        site.submit("acme")
    for _ in range(3):
        site.submit("acme", Priority.BATCH)
    # One interactive job read: held by a manager, no longer waiting in the stream.
    await site.queue.read(site.model, 1, 100, [Priority.INTERACTIVE])

    await site.sampler.sample()

    assert value("synapse_stream_depth", model=site.model, priority="interactive") == 1
    assert value("synapse_stream_depth", model=site.model, priority="batch") == 3
    assert value("synapse_queue_depth", model=site.model, stage="stream") == 4
    assert value("synapse_jobs_submitted_total", model=site.model) == 5
    assert value("synapse_queue_depth", model="idle-model", stage="stream") == 0, "no stream yet: none wait"
