"""Fixtures for the in-process dispatcher tests: a Redis database of their own and one `Site` per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
import redis.asyncio as aioredis

from frontdoor.store import JobStore
from manager import dispatcher
from tests.dispatcher.harness import JOB_TTL_S, Site

DATABASE = 5  # apart from the integration stack's (0, 1, 3), whose manager would read this registry
MAX_QUEUE_LENGTH = 1000


@pytest.fixture(scope="session")
def dispatcher_redis_url(redis_url: str) -> str:
    return redis_url.rsplit("/", 1)[0] + f"/{DATABASE}"


@pytest.fixture(autouse=True)
def quick_upkeep(monkeypatch: pytest.MonkeyPatch) -> None:
    """The upkeep loop ticks every 50 ms rather than 500, so that claims measured in tenths of a second
    (reclaim_idle_s here) are renewed, reclaimed and expired the way seconds are in production."""
    monkeypatch.setattr(dispatcher, "UPKEEP_S", 0.05)


@pytest.fixture
async def r(dispatcher_redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(dispatcher_redis_url, decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture
def sync_redis(dispatcher_redis_url: str) -> Iterator[redis.Redis]:
    """A blocking client, as the front door has: a call on it holds the test's event loop still."""
    client = redis.Redis.from_url(dispatcher_redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def store(sync_redis: redis.Redis) -> JobStore:
    """The front door's store, with its submit script."""
    return JobStore(sync_redis, JOB_TTL_S, MAX_QUEUE_LENGTH)


@pytest.fixture
def model() -> str:
    """A model of the test's own: its own stream, its own workers."""
    return f"model-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def site(r: aioredis.Redis, store: JobStore, model: str) -> AsyncIterator[Site]:
    site = Site(r, store, model)
    yield site
    await site.aclose()
