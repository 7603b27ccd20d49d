"""The autoscaler loop outlives whatever its provider raises, backs off, and says whether it still runs.

Driven against a real Redis (`redis_url`); the provider is a double that fails as boto3 does on AWS.
"""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError
from prometheus_client import REGISTRY

from contract.jobs import now_ms
from contract.keys import LEADER_KEY, wake_key
from contract.settings import Settings
from contract.workers import WorkerRegistry
from manager import autoscaler
from manager.autoscaler import AutoscalerLoop, retry_delay_s
from manager.busy import BusyClock
from manager.fleet import Fleet
from manager.providers import Capacity
from manager.service import serve_metrics
from tests.processes import free_port


def throttled() -> ClientError:
    error = {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}
    return ClientError(error, "DescribeServices")  # type: ignore[arg-type]


BOTO_FAILURES: list[BaseException] = [
    throttled(),
    EndpointConnectionError(endpoint_url="https://ecs.eu-west-1.amazonaws.com/"),
    NoCredentialsError(),
]


class FlakyProvider:
    """Raises the queued failures (from `capacity` or `set_desired`), one per call, then works."""

    def __init__(self, failures: list[BaseException], *, in_set_desired: bool = False) -> None:
        self.failures = list(failures)
        self.in_set_desired = in_set_desired
        self.capacity_calls = 0
        self.desired: list[int] = []
        self.closed = False

    def _maybe_fail(self) -> None:
        if self.failures:
            raise self.failures.pop(0)

    async def capacity(self) -> Capacity:
        self.capacity_calls += 1
        if not self.in_set_desired:
            self._maybe_fail()
        return Capacity(desired=self.desired[-1] if self.desired else 0, running=0)

    async def set_desired(self, count: int) -> None:
        if self.in_set_desired:
            self._maybe_fail()
        self.desired.append(count)

    async def aclose(self) -> None:
        self.closed = True


class HangsOnceProvider(FlakyProvider):
    """Its first capacity call never returns, as a boto3 call stuck on the network would."""

    async def capacity(self) -> Capacity:
        if self.capacity_calls == 0:
            self.capacity_calls += 1
            await asyncio.Event().wait()
        return await super().capacity()


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Ticks of 10 ms and a backoff capped at 50 ms, so a test sees many rounds in a second."""
    monkeypatch.setattr(autoscaler, "TICK_S", 0.01)
    monkeypatch.setattr(autoscaler, "MAX_BACKOFF_S", 0.05)
    yield


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    redis = aioredis.Redis.from_url(redis_url, decode_responses=True)
    await redis.delete(LEADER_KEY)
    yield redis
    await redis.delete(LEADER_KEY)
    await redis.aclose()


def make_loop(client: aioredis.Redis, provider: FlakyProvider) -> AutoscalerLoop:
    settings = Settings(redis_url="redis://unused", models=("gpu-sim",), min_workers=1, max_workers=2)
    fleet = Fleet.for_triton(WorkerRegistry(client, 1.0), 1.0, 1, BusyClock())
    return AutoscalerLoop(
        client,
        settings,
        provider=provider,
        fleet=fleet,
        local_backlog=lambda model: 0,
        sequences=lambda model: None,
        identity="test-loop",
    )


def errors(kind: str) -> float:
    return REGISTRY.get_sample_value("synapse_autoscaler_errors_total", {"kind": kind}) or 0.0


async def eventually(check: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("in_set_desired", [False, True], ids=["capacity", "set_desired"])
async def test_botocore_errors_are_counted_and_the_provider_is_asked_again(
    fast: None, client: aioredis.Redis, in_set_desired: bool
):
    provider = FlakyProvider(BOTO_FAILURES, in_set_desired=in_set_desired)
    kinds = ("ClientError", "EndpointConnectionError", "NoCredentialsError")
    before = {kind: errors(kind) for kind in kinds}
    loop = make_loop(client, provider)
    loop.start()
    try:
        await eventually(lambda: len(provider.desired) >= 2)  # recovered, and still ticking after
        assert loop.alive()
        assert loop.failures == 0
    finally:
        await loop.aclose()
    assert not provider.failures
    assert provider.capacity_calls >= 5  # three failed rounds, then two that worked
    assert provider.desired[0] == 1  # min_workers, asked for as soon as the provider answers
    assert {kind: errors(kind) - before[kind] for kind in kinds} == dict.fromkeys(kinds, 1.0)
    assert provider.closed


async def test_any_exception_of_the_provider_keeps_the_loop_going(fast: None, client: aioredis.Redis):
    provider = FlakyProvider([RuntimeError("a bug"), KeyError("services"), OSError("reset")] * 2)
    loop = make_loop(client, provider)
    loop.start()
    try:
        await eventually(lambda: bool(provider.desired))
        assert loop.alive()
    finally:
        await loop.aclose()


async def test_a_provider_call_that_never_returns_is_abandoned_and_retried(
    fast: None, client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(autoscaler, "ITERATION_TIMEOUT_S", 0.2)
    before = errors("TimeoutError")
    provider = HangsOnceProvider([])
    loop = make_loop(client, provider)
    loop.start()
    try:
        await eventually(lambda: bool(provider.desired))
    finally:
        await loop.aclose()
    assert errors("TimeoutError") - before == 1.0
    assert provider.capacity_calls >= 2


async def test_while_failing_the_loop_backs_off_and_is_still_alive(
    fast: None, client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(autoscaler, "MAX_BACKOFF_S", 0.2)
    provider = FlakyProvider([NoCredentialsError()] * 1000)
    loop = make_loop(client, provider)
    loop.start()
    try:
        await asyncio.sleep(1.0)
        assert loop.alive()  # failing rounds are rounds: the loop is not stuck
    finally:
        await loop.aclose()
    # Backoff 0.02, 0.04, 0.08, 0.16, then 0.2 s: about 8 rounds in a second, not 100.
    assert 4 <= provider.capacity_calls <= 12
    assert not provider.desired


def test_the_retry_delay_doubles_per_failure_and_is_capped():
    assert retry_delay_s(0) == autoscaler.TICK_S
    assert [retry_delay_s(n) for n in range(1, 7)] == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert retry_delay_s(10_000) == autoscaler.MAX_BACKOFF_S


async def test_alive_is_false_once_the_loop_ended_or_stopped_going_round(
    fast: None, client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
):
    loop = make_loop(client, FlakyProvider([]))
    assert loop.alive()  # not started yet, but only just built
    loop.last_round = time.monotonic() - autoscaler.STALE_AFTER_S - 1
    assert not loop.alive()  # built long ago and never went round
    loop.start()
    await eventually(loop.alive)
    stale_after = autoscaler.STALE_AFTER_S
    monkeypatch.setattr(autoscaler, "STALE_AFTER_S", 0.0)
    assert not loop.alive()  # a loop that stopped going round (a frozen event loop looks the same)
    monkeypatch.setattr(autoscaler, "STALE_AFTER_S", stale_after)
    await loop.aclose()
    assert not loop.alive()  # its task is done


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


async def test_healthz_answers_503_when_unhealthy_and_metrics_carry_the_error_counter():
    healthy = [True]
    port = free_port()
    server = serve_metrics(port, "127.0.0.1", lambda: healthy[0])
    try:
        assert await asyncio.to_thread(fetch, f"http://127.0.0.1:{port}/healthz") == (200, "ok\n")
        healthy[0] = False
        status, body = await asyncio.to_thread(fetch, f"http://127.0.0.1:{port}/healthz")
        assert (status, body) == (503, "the autoscaler loop stopped\n")
        status, body = await asyncio.to_thread(fetch, f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert "synapse_autoscaler_last_tick_timestamp_seconds" in body
        assert "# TYPE synapse_autoscaler_errors_total counter" in body
    finally:
        server.shutdown()
        server.server_close()


async def test_a_wake_is_remembered_after_its_key_expires(client: aioredis.Redis):
    """A /v1 wake key lives 60 s; a start from zero takes minutes: the pool must not drop back to zero."""
    loop = make_loop(client, FlakyProvider([]))
    await client.set(wake_key("gpu-sim"), str(now_ms()))
    first = await loop.snapshot()
    await client.delete(wake_key("gpu-sim"))  # the key expired
    later = await loop.snapshot()
    assert first.woken_at is not None
    assert later.woken_at == first.woken_at
