"""Cancels are never lost: the time limit keeps a cancel that lands as the awaited call finishes (a
client's cancel of a streaming generation, whose next response is nearly always ready, must stop it), and
stopping a task ends it even when a library takes its cancel for a failure and retries."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
import redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from contract.time_limit import stop, within


async def cancelled_as_its_answer_arrives(limit: Callable[[float, Awaitable[str]], Awaitable[str]]) -> str:
    """Cancels a task in the same loop step as the response it awaits arrives; what the task then did."""
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def follow() -> str:
        await limit(10.0, answer)
        return "went on reading"

    task = asyncio.create_task(follow())
    await asyncio.sleep(0)  # the task now waits on the answer
    answer.set_result("next delta")
    task.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        return "stopped"


def test_a_cancel_that_lands_with_the_answer_stops_the_call() -> None:
    # Python 3.11's asyncio.wait_for "went on reading" here (CPython gh-86296).
    assert asyncio.run(cancelled_as_its_answer_arrives(within)) == "stopped"


async def slow() -> None:
    await asyncio.sleep(10)


def test_the_limit_still_times_out() -> None:
    with pytest.raises(TimeoutError):
        asyncio.run(within(0.01, slow()))


async def stopped(loop: Coroutine[Any, Any, None]) -> bool:
    """Runs the loop as a task, stops it (within 10 s), and says whether it ended cancelled."""
    task = asyncio.create_task(loop)
    await asyncio.sleep(0)
    await asyncio.wait_for(stop(task), timeout=10)
    return task.cancelled()


def test_stopping_a_loop_that_takes_its_cancel_for_a_timeout_still_ends_it() -> None:
    """A loop that retries on TimeoutError, whose first cancel became one (3.11's asyncio.timeout does
    that when the cancel lands as its time runs out), is cancelled again until it ends."""

    async def main() -> int:
        rounds = 0

        async def retrying_loop() -> None:
            nonlocal rounds
            while True:
                rounds += 1
                try:
                    await asyncio.sleep(10)
                except asyncio.CancelledError:
                    if rounds == 1:
                        continue  # as if the cancel had come back as a TimeoutError, and was retried
                    raise

        assert await stopped(retrying_loop())
        return rounds

    assert asyncio.run(main()) == 2


def test_stopping_a_redis_call_whose_cancel_came_out_as_a_dropped_connection_still_ends_it() -> None:
    """redis-py 7.4's asyncio client can surface a cancel that lands mid-reply as ConnectionError("Connection
    closed by server"), which its own Retry then retries: the agent's load loop ran on for good (CI)."""

    async def main() -> int:
        reads = 0

        async def read_reply() -> None:
            nonlocal reads
            reads += 1
            try:
                await asyncio.sleep(10)  # waiting for the reply of a BLPOP
            except asyncio.CancelledError:
                if reads == 1:
                    raise redis.ConnectionError("Connection closed by server.") from None
                raise

        async def on_failure(error: Exception) -> None:
            pass

        async def load_loop() -> None:
            while True:
                await Retry(NoBackoff(), retries=3).call_with_retry(read_reply, on_failure)

        assert await stopped(load_loop())
        return reads

    assert asyncio.run(main()) == 2
