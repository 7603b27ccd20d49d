"""Fixtures for the in-process dispatcher tests: a store of their own and one `Site` per test.

Every test runs on a plain Redis and on a Redis Cluster (ids `redis` and `redis-cluster`): the claim,
completion and reclaim scripts are the job store's multi-key paths.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from contract.job_store import JobStore
from contract.redis_client import AsyncRedis, SyncRedis
from manager import dispatcher
from manager.queue import JobQueue
from tests.dispatcher.harness import JOB_TTL_S, Site
from tests.redis_cluster import LocalRedisCluster, sync_test_client

DATABASE = 5  # apart from the integration stack's (0, 1, 3), whose manager would read this registry
MAX_QUEUE_LENGTH = 1000


@pytest.fixture(scope="session")
def dispatcher_cluster(tmp_path_factory: pytest.TempPathFactory, logs: Path) -> Iterator[LocalRedisCluster]:
    """A cluster of their own: the integration stack's manager, on the shared one, would see these workers."""
    with LocalRedisCluster.running(tmp_path_factory.mktemp("dispatcher-cluster"), logs) as cluster:
        yield cluster


@pytest.fixture(scope="session", params=["plain", "cluster"], ids=["redis", "redis-cluster"])
def dispatcher_store(request: pytest.FixtureRequest) -> tuple[str, bool]:
    """The store's URL, and whether it is a cluster."""
    if request.param == "cluster":
        cluster: LocalRedisCluster = request.getfixturevalue("dispatcher_cluster")
        return cluster.url, True
    redis_url: str = request.getfixturevalue("redis_url")
    return redis_url.rsplit("/", 1)[0] + f"/{DATABASE}", False


@pytest.fixture(autouse=True)
def quick_upkeep(monkeypatch: pytest.MonkeyPatch) -> None:
    """The upkeep loop ticks every 50 ms rather than 500, so that claims measured in tenths of a second
    (reclaim_idle_s here) are renewed, reclaimed and expired the way seconds are in production."""
    monkeypatch.setattr(dispatcher, "UPKEEP_S", 0.05)


def client_name(model: str) -> str:
    """The name of every connection a test's site opens: CLIENT LIST lists the whole server, where other
    tests' managers (other xdist workers, other stacks) hold reads of their own."""
    return f"site-{model}"


@pytest.fixture
async def r(dispatcher_store: tuple[str, bool], model: str) -> AsyncIterator[AsyncRedis]:
    url, cluster = dispatcher_store
    name = client_name(model)
    client: AsyncRedis = (
        aioredis.RedisCluster.from_url(url, decode_responses=True, client_name=name)
        if cluster
        else aioredis.Redis.from_url(url, decode_responses=True, client_name=name)
    )
    yield client
    await client.aclose()


@pytest.fixture
def sync_redis(dispatcher_store: tuple[str, bool]) -> Iterator[SyncRedis]:
    """A blocking client, as the front door has: a call on it holds the test's event loop still."""
    url, cluster = dispatcher_store
    client = sync_test_client(url, cluster=cluster)
    yield client
    client.close()


@pytest.fixture
def store(sync_redis: SyncRedis) -> JobStore:
    """The front door's store, with its submit script."""
    return JobStore(sync_redis, JOB_TTL_S, MAX_QUEUE_LENGTH)


@pytest.fixture
def model() -> str:
    """A model of the test's own: its own stream, its own workers."""
    return f"model-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def site(r: AsyncRedis, store: JobStore, model: str) -> AsyncIterator[Site]:
    site = Site(r, store, model)
    yield site
    await site.aclose()


@pytest.fixture
async def queue(r: AsyncRedis, model: str) -> JobQueue:
    """One manager's side of the queue, with the model's consumer group created."""
    queue = JobQueue(r, "manager-a", JOB_TTL_S)
    await queue.ensure_group(model)
    return queue
