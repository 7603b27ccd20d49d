"""A time limit on an awaited call that never loses a cancel: what every loop of the platform uses
instead of `asyncio.wait_for`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(seconds: float, awaitable: Awaitable[T]) -> T:
    """`asyncio.wait_for`, but a cancel that lands as the awaited thing finishes is never lost.

    Python 3.11's wait_for returns the result then and drops the cancel (CPython gh-86296, fixed in 3.12
    by rebuilding wait_for on `asyncio.timeout`): a client's cancel of a streaming generation, whose
    next response is nearly always ready, was swallowed and the engine ran the sequence to its end."""
    async with asyncio.timeout(seconds):
        return await awaitable
