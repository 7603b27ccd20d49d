"""A time limit that keeps a cancel racing the result (instead of `asyncio.wait_for`), and stopping a
task by sending its cancel again while it runs (for every task that may be inside a Redis call)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)

# How long a stopping task has to end before it is cancelled again.
RECANCEL_S = 1.0
# Cancels after which a task that still runs is worth a warning: one lost cancel is redis-py's, more is ours.
STUBBORN_AFTER = 5


async def within(seconds: float, awaitable: Awaitable[T]) -> T:
    """`asyncio.wait_for`, but a cancel that lands as the awaited thing finishes is never lost.

    Python 3.11's wait_for returns the result then and drops the cancel (CPython gh-86296, fixed in 3.12
    by rebuilding wait_for on `asyncio.timeout`): a client's cancel of a streaming generation, whose
    next response is nearly always ready, was swallowed and the engine ran the sequence to its end."""
    async with asyncio.timeout(seconds):
        return await awaitable


async def stop(task: asyncio.Task[Any] | None) -> None:
    """Cancels the task and waits until it has ended, cancelling it again every RECANCEL_S while it runs;
    what it raises on the way out, other than the cancel, is raised here. A task already done is left
    as it is: its outcome is for whoever watched it (a runner's batch, the agent's heartbeat).

    A loop that retries on failure goes on when its cancel reaches it as a failure. redis-py 7.4's
    asyncio client does that: a cancel that lands while it reads a reply (a BLPOP, a pipeline) can come
    out as `ConnectionError("Connection closed by server")`, which its own Retry then retries, and the
    cancel is gone. Up to one cancel in a hundred, against a local Redis; a manager's read loop and a
    worker agent's load loop each kept running for good in CI. Sending the cancel again holds."""
    if task is None or task.done():
        return
    for sent in itertools.count(1):
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_S)
        if task.done():
            break
        if sent == STUBBORN_AFTER:
            log.warning("task %s still runs after %d cancels; cancelling it again every %.0f s",
                        task.get_name(), sent, RECANCEL_S)  # fmt: skip
    with contextlib.suppress(asyncio.CancelledError):
        await task
