"""A live worker's registration never expires between two heartbeats, busy, starting or degraded; a
hung Triton is given up in bounded time, and the agent's way out cannot hang on it or on Redis."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis

from contract.keys import worker_key
from contract.settings import Settings
from contract.time_limit import stop
from contract.workers import (
    REGISTRATION_TTL_BEATS,
    WorkerInfo,
    WorkerRegistry,
    WorkerState,
    readiness_timeout_s,
    registration_ttl_s,
    worst_renewal_gap_s,
)
from worker_image import triton_server
from worker_image.agent import ReadinessWatch, TritonHungError, WorkerAgent
from worker_image.triton_server import TritonInstall

HEARTBEATS_S = [0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0]


@pytest.mark.parametrize("heartbeat_s", HEARTBEATS_S)
def test_the_ttl_outlives_the_worst_renewal_gap_by_a_heartbeat(heartbeat_s: float):
    timeout_s = readiness_timeout_s(heartbeat_s)
    assert 0 < timeout_s < heartbeat_s  # the readiness check cannot hold up the beat
    gap = worst_renewal_gap_s(heartbeat_s, timeout_s)
    ttl = registration_ttl_s(heartbeat_s, timeout_s)
    assert ttl >= gap + heartbeat_s
    assert ttl >= REGISTRATION_TTL_BEATS * heartbeat_s


def test_the_defaults_leave_a_margin_and_a_dead_worker_still_drops_out_in_three_beats():
    heartbeat_s = Settings().heartbeat_s
    ttl = registration_ttl_s(heartbeat_s, readiness_timeout_s(heartbeat_s))
    assert ttl - worst_renewal_gap_s(heartbeat_s, readiness_timeout_s(heartbeat_s)) >= heartbeat_s
    assert ttl == REGISTRATION_TTL_BEATS * heartbeat_s == 6.0
    assert registration_ttl_s(1.0, readiness_timeout_s(1.0)) == 3.0  # the fault tests' 1 s heartbeat


def test_the_issues_figures_would_now_keep_the_worker():
    # "Nothing stuck": a 2 s heartbeat followed by a 5 s readiness check, against a 6 s TTL, flapped.
    assert worst_renewal_gap_s(2.0, 5.0) > REGISTRATION_TTL_BEATS * 2.0
    assert registration_ttl_s(2.0, 5.0) > worst_renewal_gap_s(2.0, 5.0)


async def test_the_registry_writes_that_ttl(redis_url: str):
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    registry = WorkerRegistry(client, 2.0)
    info = WorkerInfo("ttl-check", "", "", "", frozenset(), WorkerState.STARTING, started_ms=0)
    try:
        await registry.publish(info)
        assert 5_000 < await client.pttl(worker_key("ttl-check")) <= registry.ttl_s * 1000 == 6_000
    finally:
        await registry.remove("ttl-check")
        await client.aclose()


def test_one_slow_answer_never_gives_a_busy_triton_up():
    watch = ReadinessWatch(limit_s=15.0, last_ready=0.0)
    for second in range(100):  # a failed check every other second: never three in a row
        assert not watch.observe(second % 2 == 0, float(second))


def test_one_slow_readiness_answer_keeps_the_worker_serving_and_two_in_a_row_degrade_it():
    """A Triton loading a model on a busy host may miss one check (CI saw a worker go DEGRADED for a beat
    while it loaded tiny-gpt2); the manager stops sending batches only after two in a row."""
    watch = ReadinessWatch(limit_s=15.0, last_ready=0.0)
    watch.observe(False, 1.0)
    assert not watch.degraded
    watch.observe(True, 2.0)
    watch.observe(False, 3.0)
    assert not watch.degraded
    watch.observe(False, 4.0)
    assert watch.degraded
    watch.observe(True, 5.0)
    assert not watch.degraded


def test_hung_needs_three_failed_checks_in_a_row_and_the_time_limit():
    watch = ReadinessWatch(limit_s=15.0, last_ready=0.0)
    assert [watch.observe(False, t) for t in (2.0, 4.0, 16.0)] == [False, False, True]
    quick = ReadinessWatch(limit_s=15.0, last_ready=0.0)
    assert [quick.observe(False, t) for t in (10.0, 20.0)] == [False, False]  # two checks only
    assert quick.observe(False, 21.0)
    slow = ReadinessWatch(limit_s=15.0, last_ready=0.0)
    assert not any(slow.observe(False, t) for t in (1.0, 2.0, 3.0, 14.9))  # four checks, 14.9 s
    assert slow.observe(False, 15.0)
    slow.observe(True, 16.0)  # ready again: the count starts over
    assert not any(slow.observe(False, t) for t in (17.0, 18.0, 30.9))
    assert slow.observe(False, 31.0)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers: a SIGSTOPped server looks like this."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


@pytest.fixture
async def agent(redis_url: str, silent_port: int, tmp_path: Path) -> AsyncIterator[WorkerAgent]:
    """An agent between registration and Triton being ready, its Triton hung (no process of its own)."""
    settings = Settings(
        redis_url=redis_url, worker_id="timing-1", heartbeat_s=0.2, triton_unready_exit_s=1.0,
        triton_http_port=silent_port, state_dir=tmp_path, pushgateway_url="http://127.0.0.1:9",
    )  # fmt: skip
    agent = WorkerAgent(settings)
    agent._http = aiohttp.ClientSession()
    agent.info = await agent._registry.publish(agent.info)
    yield agent
    await agent.aclose()


async def watch_registration(redis_url: str, worker_id: str, seconds: float) -> list[tuple[str, int]]:
    """(state, heartbeat_ms) of the registration every 20 ms; fails at once if it ever expires."""
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    seen: list[tuple[str, int]] = []
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            fields = await client.hgetall(worker_key(worker_id))
            assert fields, f"the registration of {worker_id} expired"
            seen.append((fields["state"], int(fields["heartbeat_ms"])))
            await asyncio.sleep(0.02)
    finally:
        await client.aclose()
    return seen


def gaps_s(seen: list[tuple[str, int]]) -> list[float]:
    beats = sorted({beat for _, beat in seen})
    return [(b - a) / 1000 for a, b in itertools.pairwise(beats)]


async def test_a_starting_worker_stays_registered_while_triton_loads(
    redis_url: str, silent_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # A "Triton" that never gets ready (it loads models for minutes): the agent's start() waits on it.
    monkeypatch.setattr(triton_server, "locate", lambda state_dir: TritonInstall(Path("sleep"), None, {}))
    monkeypatch.setattr(triton_server, "command", lambda install, **options: ["sleep", "600"])
    settings = Settings(
        redis_url=redis_url, worker_id="starting-1", heartbeat_s=0.2, triton_http_port=silent_port,
        state_dir=tmp_path, model_repository=tmp_path, worker_models=("none",),
        pushgateway_url="http://127.0.0.1:9",
    )  # fmt: skip
    agent = WorkerAgent(settings)
    starting = asyncio.create_task(agent.start())
    try:
        await eventually_registered(redis_url, "starting-1")
        seen = await watch_registration(redis_url, "starting-1", 3 * agent._registry.ttl_s)
        assert not starting.done()
    finally:
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        await agent.aclose()
    assert {state for state, _ in seen} == {WorkerState.STARTING}
    assert len(gaps_s(seen)) >= 10  # it beats, every 0.2 s, while Triton is not ready
    assert max(gaps_s(seen)) < worst_renewal_gap_s(0.2, readiness_timeout_s(0.2))


async def eventually_registered(redis_url: str, worker_id: str) -> None:
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        deadline = time.monotonic() + 10
        while not await client.exists(worker_key(worker_id)):
            assert time.monotonic() < deadline, f"{worker_id} never registered"
            await asyncio.sleep(0.02)
    finally:
        await client.aclose()


async def test_a_hung_triton_keeps_the_beat_then_the_agent_gives_up(agent: WorkerAgent, redis_url: str):
    agent._watch = ReadinessWatch(limit_s=1.0, last_ready=time.monotonic())  # serving from now on
    heartbeat = asyncio.create_task(agent._heartbeat_loop())
    started = time.monotonic()
    seen = await watch_registration(redis_url, "timing-1", 0.9)
    with pytest.raises(TritonHungError):
        await asyncio.wait_for(heartbeat, 3)
    gave_up_after = time.monotonic() - started
    assert isinstance(agent.fault, TritonHungError)
    assert seen[-1][0] == WorkerState.DEGRADED  # from the second failed check on (STARTING before it)
    assert {state for state, _ in seen} <= {WorkerState.STARTING, WorkerState.READY, WorkerState.DEGRADED}
    assert len({beat for state, beat in seen if state == WorkerState.READY}) <= 1, "one failed check only"
    # Each readiness check waits out its timeout (half a beat): the beats stay 0.2 s apart anyway.
    worst = worst_renewal_gap_s(0.2, readiness_timeout_s(0.2))
    assert max(gaps_s(seen)) < worst
    assert 1.0 <= gave_up_after < 1.0 + 5 * 0.2


async def test_closing_kills_a_stopped_triton_and_does_not_wait_for_a_silent_redis(
    silent_port: int, tmp_path: Path
):
    settings = Settings(
        redis_url=f"redis://127.0.0.1:{silent_port}/0", worker_id="closing-1", state_dir=tmp_path,
        pushgateway_url="http://127.0.0.1:9",
    )  # fmt: skip
    agent = WorkerAgent(settings)
    triton = await asyncio.create_subprocess_exec("sleep", "600")
    triton.send_signal(signal.SIGSTOP)  # SIGTERM would stay pending until a SIGCONT that never comes
    agent._process = triton
    agent.fault = TritonHungError("hung")
    started = time.monotonic()
    try:
        await asyncio.wait_for(agent.aclose(), 15)
    finally:
        if triton.returncode is None:
            triton.kill()
            await triton.wait()
    assert triton.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 8  # one bounded Redis call (3 s) and a kill, no 15 s SIGTERM wait


async def test_closing_a_hung_worker_whose_load_loop_lost_its_cancel_kills_triton_and_ends(
    redis_url: str, tmp_path: Path
):
    """redis-py can take a cancel that lands mid-reply for a dropped connection and retry (CI: the agent
    dropped out by its registration's TTL only, its stopped Triton and stubs lived on, and no worker
    replaced it). The hung Triton goes first, and the loop is cancelled again until it ends."""
    settings = Settings(
        redis_url=redis_url, worker_id="closing-2", state_dir=tmp_path, pushgateway_url="http://127.0.0.1:9",
    )  # fmt: skip
    agent = WorkerAgent(settings)
    triton = await asyncio.create_subprocess_exec("sleep", "600")
    triton.send_signal(signal.SIGSTOP)
    agent._process = triton
    agent.fault = TritonHungError("hung")
    cancels_taken = 0
    triton_at_first_cancel: int | None = None

    async def load_loop_that_retries_its_first_cancel() -> None:
        nonlocal cancels_taken, triton_at_first_cancel
        while True:
            try:
                await asyncio.sleep(10)  # a BLPOP waiting for a load request
            except asyncio.CancelledError:
                cancels_taken += 1
                if cancels_taken > 1:
                    raise
                triton_at_first_cancel = triton.returncode
                # as redis-py's Retry does with a ConnectionError: ask again

    agent._loads = asyncio.create_task(load_loop_that_retries_its_first_cancel())
    await asyncio.sleep(0)
    closing = asyncio.create_task(agent.aclose())
    try:
        await asyncio.wait({closing}, timeout=8)  # not wait_for: its own cancel would be a second one
        assert closing.done(), "the agent's way out hung on its load loop"
        assert triton.returncode == -signal.SIGKILL
        assert triton_at_first_cancel == -signal.SIGKILL, "the hung Triton is killed before anything else"
        assert agent._loads.cancelled() and cancels_taken == 2
    finally:
        await stop(closing)
        if triton.returncode is None:
            triton.kill()
            await triton.wait()
