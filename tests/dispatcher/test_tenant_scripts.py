"""The scripts behind a tenant's view of its jobs, against a real Redis: the in-flight quota, the index
GET /jobs pages through, cancellation, and what a job's end does to all of them."""

from __future__ import annotations

import uuid

import pytest

from contract.job_store import JobStore, QuotaExceededError
from contract.jobs import Job, JobStatus, Outcome, Priority
from contract.keys import (
    CALLBACKS_KEY,
    COUNTS_KEY,
    done_key,
    inflight_key,
    job_key,
    stream_key,
    tenant_jobs_key,
    tokens_key,
)
from contract.redis_client import AsyncRedis, SyncRedis
from manager.queue import JobQueue
from tests.dispatcher.harness import JOB_TTL_S, entries


@pytest.fixture
def tenant() -> str:
    """A tenant of the test's own: its own quota, index and counts in the shared Redis."""
    return f"t-{uuid.uuid4().hex[:10]}"


def new_job(model: str, tenant: str, **extra: object) -> Job:
    return Job.new(
        model=model, prompt="hello", max_tokens=4, timeout_ms=30_000, tenant=tenant,
        **extra,  # type: ignore[arg-type]
    )  # fmt: skip


def completed(job: Job) -> Outcome:
    return Outcome(
        job_id=job.id, status=JobStatus.COMPLETED, started_ms=job.created_ms, completed_ms=job.created_ms + 1,
        batch_size=1, text="ok",
    )  # fmt: skip


async def test_a_tenant_at_its_quota_is_refused_and_nothing_is_written(
    r: AsyncRedis, store: JobStore, model: str, tenant: str
) -> None:
    for _ in range(2):
        assert store.submit(new_job(model, tenant), max_inflight=2)
    refused = new_job(model, tenant)

    with pytest.raises(QuotaExceededError):
        store.submit(refused, max_inflight=2)

    assert await r.exists(job_key(refused.id)) == 0
    assert await r.xlen(stream_key(model)) == 2
    assert store.submit(new_job(model, tenant + "-other"), max_inflight=2)  # quotas are per tenant


async def test_a_job_that_ends_frees_its_place_in_the_quota(
    r: AsyncRedis, store: JobStore, queue: JobQueue, model: str, tenant: str
) -> None:
    first = new_job(model, tenant)
    assert store.submit(first, max_inflight=1)
    [delivery] = await queue.read(model, count=10, block_ms=100)

    await queue.complete(model, [completed(first)], entries(delivery))

    assert await r.zcard(inflight_key(tenant)) == 0
    assert store.submit(new_job(model, tenant), max_inflight=1)


async def test_the_end_of_a_job_counts_it_makes_its_callback_due_and_starts_its_own_lifetime(
    r: AsyncRedis, store: JobStore, queue: JobQueue, model: str, tenant: str
) -> None:
    job = new_job(model, tenant, callback="http://127.0.0.1:9/hook", ttl_s=120)
    store.submit(job)
    [delivery] = await queue.read(model, count=10, block_ms=100)
    await r.xadd(tokens_key(job.id), {"t": "some text"})  # a generative job's text
    await r.expire(tokens_key(job.id), JOB_TTL_S)

    await queue.complete(model, [completed(job)], entries(delivery))

    assert 0 < await r.ttl(job_key(job.id)) <= 120
    assert 0 < await r.ttl(done_key(job.id)) <= 120
    assert 0 < await r.ttl(tokens_key(job.id)) <= 120  # its text goes with it
    assert await r.zscore(CALLBACKS_KEY, job.id) is not None
    counts = await r.hgetall(COUNTS_KEY)  # type: ignore[misc]
    assert (counts[f"{tenant}|submitted"], counts[f"{tenant}|completed"]) == ("1", "1")


async def test_cancelling_a_queued_job_ends_it_at_once_and_takes_it_off_its_stream(
    r: AsyncRedis, store: JobStore, model: str, tenant: str
) -> None:
    job = new_job(model, tenant, priority=Priority.BATCH, callback="http://127.0.0.1:9/hook")
    store.submit(job)
    fields = store.get(job.id)
    assert fields is not None

    assert store.cancel(fields, "asked by its client") is JobStatus.QUEUED  # what it was

    after = await r.hgetall(job_key(job.id))  # type: ignore[misc]
    assert (after["status"], after["error_code"]) == ("CANCELLED", "cancelled")
    assert await r.xlen(stream_key(model, Priority.BATCH)) == 0  # no manager will ever read it
    assert await r.llen(done_key(job.id)) == 1  # type: ignore[misc]  # its long-pollers wake
    assert await r.zcard(inflight_key(tenant)) == 0
    assert await r.zscore(CALLBACKS_KEY, job.id) is not None
    counts = await r.hgetall(COUNTS_KEY)  # type: ignore[misc]
    assert (counts[f"{tenant}|cancelled"], counts[f"model|{model}|cancelled"]) == ("1", "1")


async def test_cancelling_a_running_job_asks_its_manager_and_a_final_one_is_left_alone(
    r: AsyncRedis, store: JobStore, queue: JobQueue, model: str, tenant: str
) -> None:
    running, finished = new_job(model, tenant), new_job(model, tenant)
    for job in (running, finished):
        store.submit(job)
    first, second = await queue.read(model, count=10, block_ms=100)
    await queue.mark_running([running], running.created_ms, "worker-1")
    await queue.complete(model, [completed(finished)], entries(second))

    assert store.cancel_by_id(running.id, "asked") is JobStatus.RUNNING
    assert store.cancel_by_id(finished.id, "asked") is JobStatus.COMPLETED
    assert store.cancel_by_id("00000000-0000-0000-0000-000000000000", "asked") is None

    assert (await r.hgetall(job_key(running.id)))["cancel_requested"] == "asked"  # type: ignore[misc]
    assert (await r.hgetall(job_key(finished.id)))["status"] == "COMPLETED"  # type: ignore[misc]
    del first


async def test_a_listing_pages_newest_first_with_no_duplicate_or_gap(
    sync_redis: SyncRedis, store: JobStore, model: str, tenant: str
) -> None:
    jobs = [new_job(model, tenant) for _ in range(25)]
    for job in jobs:
        store.submit(job)
    store.submit(new_job(model, tenant + "-other"))

    seen: list[str] = []
    after = None
    while True:
        page, after = store.list_jobs(tenant, limit=7, after=after, status=None, model=None)
        seen += [record.id for record in page]
        if after is None:
            break

    # Newest first; jobs of the same millisecond by id, so that the order is total.
    assert seen == [j.id for j in sorted(jobs, key=lambda j: (j.created_ms, j.id), reverse=True)]
    assert sync_redis.zcard(tenant_jobs_key(tenant)) == 25


async def test_a_filtered_listing_returns_only_matching_jobs(
    r: AsyncRedis, store: JobStore, queue: JobQueue, model: str, tenant: str
) -> None:
    jobs = [new_job(model, tenant) for _ in range(4)]
    for job in jobs:
        store.submit(job)
    deliveries = await queue.read(model, count=10, block_ms=100)
    await queue.complete(model, [completed(jobs[1])], entries(deliveries[1]))

    page, after = store.list_jobs(tenant, limit=10, after=None, status="COMPLETED", model=None)

    assert [record.id for record in page] == [jobs[1].id]
    assert after is None


async def test_linking_a_retry_to_a_record_that_expired_leaves_no_stray_hash(
    r: AsyncRedis, store: JobStore, model: str, tenant: str
) -> None:
    job = new_job(model, tenant)
    store.submit(job)
    await r.delete(job_key(job.id))  # its ttl ran out between the ownership check and the link

    store.link_retry(job.id, "a-retry")

    assert await r.exists(job_key(job.id)) == 0
    page, _ = store.list_jobs(tenant, limit=10, after=None, status=None, model=None)
    assert page == []  # its index entry outlives it, and lists nothing


async def test_a_job_cancelled_while_it_ran_ends_cancelled_even_if_its_manager_missed_the_announcement(
    r: AsyncRedis, store: JobStore, queue: JobQueue, model: str, tenant: str
) -> None:
    job = new_job(model, tenant)
    store.submit(job)
    [delivery] = await queue.read(model, count=10, block_ms=100)
    await queue.mark_running([job], job.created_ms, "worker-1")
    assert store.cancel_by_id(job.id, "cancelled by its client") is JobStatus.RUNNING

    await queue.complete(model, [completed(job)], entries(delivery))  # it ran to the end anyway

    fields = await r.hgetall(job_key(job.id))  # type: ignore[misc]
    assert (fields["status"], fields["error_code"]) == ("CANCELLED", "cancelled")
    assert "result" not in fields
    assert (await r.hgetall(COUNTS_KEY))[f"{tenant}|cancelled"] == "1"  # type: ignore[misc]
