"""The `/v1` capacity check against a real Redis, plain and cluster: the decision, the wake it leaves,
and the autoscaler reading that wake as demand."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from contract.jobs import now_ms
from contract.keys import LEADER_KEY, WORKERS_KEY, wake_key, worker_key
from contract.redis_client import SyncRedis
from contract.settings import Settings
from contract.workers import WorkerInfo, WorkerRegistry, WorkerState
from frontdoor import capacity
from frontdoor.capacity import WAKE_TTL_MS, CapacityCheck, starting_problem
from manager.autoscaler import AutoscalerLoop, woken_at
from manager.busy import BusyClock
from manager.fleet import Fleet
from manager.providers import Capacity
from tests.redis_cluster import LocalRedisCluster, sync_test_client

MODEL = "gpu-sim"
# Stores of these tests' own: the session's shared ones also hold the integration suite's stack (a live
# worker heartbeating READY, jobs left queued), which a check of "any worker READY" or "any job waiting"
# would see (CI once: a READY worker appearing between forget_workers and the check).
PRIVATE_DB = 11


def private_url(redis_url: str) -> str:
    return f"{redis_url.rsplit('/', 1)[0]}/{PRIVATE_DB}"


@pytest.fixture(scope="module")
def private_cluster(tmp_path_factory: pytest.TempPathFactory, logs: Path) -> Iterator[LocalRedisCluster]:
    with LocalRedisCluster.running(tmp_path_factory.mktemp("capacity-cluster"), logs) as cluster:
        yield cluster


@pytest.fixture(params=["plain", "cluster"])
def client(request: pytest.FixtureRequest) -> Iterator[SyncRedis]:
    if request.param == "plain":
        redis = sync_test_client(private_url(request.getfixturevalue("redis_url")), cluster=False)
        redis.flushdb()
    else:
        redis = sync_test_client(request.getfixturevalue("private_cluster").url, cluster=True)
    forget_workers(redis)
    yield redis
    forget_workers(redis)
    redis.close()


def forget_workers(redis: SyncRedis) -> None:
    for worker_id in redis.smembers(WORKERS_KEY):  # type: ignore[union-attr]
        redis.delete(worker_key(worker_id))
    redis.delete(WORKERS_KEY)
    redis.delete(wake_key(MODEL))


def register(redis: SyncRedis, worker_id: str, state: WorkerState, models: frozenset[str]) -> None:
    info = WorkerInfo(worker_id, "g", "h", "m", models, state, started_ms=now_ms())
    redis.hset(worker_key(worker_id), mapping=info.hash_fields())  # type: ignore[arg-type]
    redis.sadd(WORKERS_KEY, worker_id)


def test_with_no_worker_the_call_is_refused_and_the_model_s_wake_is_left(client: SyncRedis):
    before = now_ms()
    assert CapacityCheck(client).ready_or_wake(MODEL) is False
    woken = int(client.get(wake_key(MODEL)))  # type: ignore[arg-type]
    assert before <= woken <= now_ms()
    assert 0 < client.pttl(wake_key(MODEL)) <= WAKE_TTL_MS  # type: ignore[operator]


@pytest.mark.parametrize("state", [WorkerState.STARTING, WorkerState.STANDBY, WorkerState.DRAINING])
def test_a_worker_that_takes_no_jobs_is_not_capacity(client: SyncRedis, state: WorkerState):
    register(client, "w-1", state, frozenset({MODEL}))
    assert CapacityCheck(client).ready_or_wake(MODEL) is False
    assert client.exists(wake_key(MODEL))


def test_any_ready_worker_is_capacity_and_leaves_no_wake(client: SyncRedis):
    # One that lacks the model loads it when the job arrives: the dispatcher asks it.
    register(client, "w-1", WorkerState.STARTING, frozenset({MODEL}))
    register(client, "w-2", WorkerState.READY, frozenset({"tiny-gpt2"}))
    assert CapacityCheck(client).ready_or_wake(MODEL) is True
    assert not client.exists(wake_key(MODEL))


def test_a_registration_that_expired_is_not_capacity(client: SyncRedis):
    client.sadd(WORKERS_KEY, "w-gone")  # its hash expired; the set still lists it
    assert CapacityCheck(client).ready_or_wake(MODEL) is False


def test_a_ready_answer_is_reused_for_a_moment_and_a_refusal_never(
    client: SyncRedis, monkeypatch: pytest.MonkeyPatch
):
    clock = [100.0]
    monkeypatch.setattr(capacity.time, "monotonic", lambda: clock[0])
    check = CapacityCheck(client)
    assert check.ready_or_wake(MODEL) is False
    register(client, "w-1", WorkerState.READY, frozenset({MODEL}))
    assert check.ready_or_wake(MODEL) is True, "a worker that just came up is seen at once"
    forget_workers(client)
    assert check.ready_or_wake(MODEL) is True, "reused within READY_REUSE_S"
    clock[0] += capacity.READY_REUSE_S
    assert check.ready_or_wake(MODEL) is False


def test_the_refusal_is_a_503_with_retry_after_in_the_openai_shape():
    problem = starting_problem(MODEL, Settings().cold_start_retry_after_s)
    assert (problem.status, problem.code) == (503, "capacity_starting")
    assert problem.headers["Retry-After"] == str(Settings().cold_start_retry_after_s)
    assert 1 <= int(problem.headers["Retry-After"]) <= 60, "OpenAI SDKs honour up to 60 s"


class RecordingProvider:
    def __init__(self) -> None:
        self.desired: list[int] = []

    async def capacity(self) -> Capacity:
        return Capacity(desired=self.desired[-1] if self.desired else 0, running=0)

    async def set_desired(self, count: int) -> None:
        self.desired.append(count)

    async def aclose(self) -> None:
        pass


@pytest.fixture
async def async_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    redis = aioredis.Redis.from_url(private_url(redis_url), decode_responses=True)
    await redis.flushdb()
    yield redis
    await redis.delete(LEADER_KEY, wake_key(MODEL))
    await redis.aclose()


def autoscaler(redis: aioredis.Redis, provider: RecordingProvider) -> AutoscalerLoop:
    settings = Settings(models=(MODEL,), min_workers=0, max_workers=2, scale_to_zero_after=300)
    fleet = Fleet.for_triton(WorkerRegistry(redis, 1.0), 1.0, 1, BusyClock())
    return AutoscalerLoop(
        redis, settings, provider=provider, fleet=fleet, local_backlog=lambda model: 0,
        sequences=lambda model: None, identity="test-wake",
    )  # fmt: skip


async def test_the_autoscaler_counts_a_wake_as_demand_and_starts_a_worker(async_client: aioredis.Redis):
    provider = RecordingProvider()
    loop = autoscaler(async_client, provider)
    assert (await loop.tick()).desired == 0, "nothing queued, nothing woken"
    await async_client.set(wake_key(MODEL), now_ms() - 5_000, px=WAKE_TTL_MS)
    snapshot = await loop.snapshot()
    assert snapshot.woken_at is not None
    assert snapshot.now - 60 < snapshot.woken_at <= snapshot.now - 5, "dated at its stamp, not when read"
    assert (await loop.tick()).desired == 1
    assert provider.desired == [0, 1]


async def test_a_wake_older_than_the_idle_rule_starts_nothing(async_client: aioredis.Redis):
    provider = RecordingProvider()
    loop = autoscaler(async_client, provider)
    await async_client.set(wake_key(MODEL), now_ms() - 301_000, px=WAKE_TTL_MS)
    assert (await loop.tick()).desired == 0


def test_wake_stamps_that_are_not_times_are_ignored():
    assert woken_at(50.0, [None, "garbage", RuntimeError("no reply")]) is None
