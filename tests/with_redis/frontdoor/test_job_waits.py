"""The streaming server's long-poll waits against a real Redis, plain and cluster: every request
waiting on one job shares one blocking read, each ends at its own deadline or at the job's end, and a
job that ended before anyone waited is seen at once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.exceptions

from bench.long_polls import waiting_polls
from contract.keys import done_key
from contract.redis_client import async_client, sync_client
from contract.settings import Settings
from frontdoor.job_waits import DoneWaits
from tests.redis_cluster import LocalRedisCluster

DEADLINE_S = 20  # how long a test waits for a waiter that should end, before it fails


@pytest.fixture(params=["plain", "cluster"], ids=["redis", "redis-cluster"])
def settings(request: pytest.FixtureRequest, redis_url: str) -> Settings:
    if request.param == "cluster":
        cluster: LocalRedisCluster = request.getfixturevalue("redis_cluster")
        return Settings(redis_url=cluster.url, redis_cluster=True)
    return Settings(redis_url=redis_url)


@pytest.fixture
async def waits(settings: Settings) -> AsyncIterator[DoneWaits]:
    done = DoneWaits(async_client(settings, 8))
    yield done
    await done.aclose()


def job_id() -> str:
    return f"j-{uuid.uuid4().hex}"


async def test_requests_waiting_on_one_job_share_one_read_and_all_see_its_end(
    settings: Settings, waits: DoneWaits
):
    job, redis = job_id(), sync_client(settings)
    blocked_before = waiting_polls(redis, done_key(job))
    waiters = [asyncio.create_task(waits.until_ended(job, DEADLINE_S)) for _ in range(50)]
    async with asyncio.timeout(DEADLINE_S):
        while waits.watched == 0 or waiting_polls(redis, done_key(job)) == blocked_before:
            await asyncio.sleep(0.05)
    assert waits.watched == 1
    assert waiting_polls(redis, done_key(job)) - blocked_before == 1
    assert not any(waiter.done() for waiter in waiters), "a wait ended before its job did"

    redis.lpush(done_key(job), job)
    async with asyncio.timeout(DEADLINE_S):  # long before any waiter's own deadline
        await asyncio.gather(*waiters)
    assert waits.watched == 0
    assert redis.lrange(done_key(job), 0, -1) == [job], "the wait took the job's end from other readers"


async def test_each_request_ends_at_its_own_deadline_while_a_later_one_goes_on(waits: DoneWaits):
    job = job_id()
    short = asyncio.create_task(waits.until_ended(job, 0.3))
    long = asyncio.create_task(waits.until_ended(job, DEADLINE_S))
    async with asyncio.timeout(DEADLINE_S / 2):
        await short
    assert not long.done(), "the later deadline ended with the earlier one"
    assert waits.watched == 1
    long.cancel()


async def test_a_job_that_ended_before_the_wait_is_seen_at_once(settings: Settings, waits: DoneWaits):
    job = job_id()
    sync_client(settings).lpush(done_key(job), job)
    async with asyncio.timeout(DEADLINE_S / 2):  # not the wait's own DEADLINE_S
        await waits.until_ended(job, DEADLINE_S)
    assert waits.watched == 0


async def test_a_wait_ends_when_its_deadline_comes_and_the_read_is_given_up(waits: DoneWaits):
    waiting = asyncio.create_task(waits.until_ended(job_id(), 2.0))
    await asyncio.sleep(0.1)
    assert not waiting.done(), "a wait on a job that never ends ended before its deadline"
    async with asyncio.timeout(DEADLINE_S):
        await waiting
    async with asyncio.timeout(DEADLINE_S):
        while waits.watched:
            await asyncio.sleep(0.05)


async def test_a_store_that_fails_the_read_fails_the_wait_rather_than_end_it_as_if_done():
    """The server answers 503 with Retry-After then, as the route's own wait does, not the job unfinished."""
    unreachable = DoneWaits(async_client(Settings(redis_url="redis://127.0.0.1:1/0"), 8))
    try:
        async with asyncio.timeout(DEADLINE_S):
            with pytest.raises((redis.exceptions.ConnectionError, OSError)):
                await unreachable.until_ended(job_id(), DEADLINE_S)
        assert unreachable.watched == 0
    finally:
        await unreachable.aclose()
