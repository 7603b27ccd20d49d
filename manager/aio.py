"""asyncio helpers the manager's loops share: retrying Redis, and whether the running task is stopping."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from contract.redis_client import STORE_ERRORS

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)


def backoff_s(attempt: int) -> float:
    """The pause before retry number `attempt` (from 0) of a store call."""
    return BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]


async def with_backoff(what: str, call: Callable[[], Awaitable[T]]) -> T:
    """Retries a Redis call until it succeeds: outcomes in hand must survive a Redis restart."""
    for attempt in range(1_000_000):
        try:
            return await call()
        except STORE_ERRORS as exc:
            delay = backoff_s(attempt)
            log.warning("%s failed (%s); retrying in %.2f s", what, exc, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


def cancelling() -> bool:
    """Whether the running task itself is being cancelled (not merely a call inside it)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
