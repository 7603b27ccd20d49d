"""Long-polls waited out on the streaming server's event loop: one blocking read of a job's done-list,
however many requests wait on that job, and no thread held by any of them.

A thread per long-poll was what a burst cost: 3,000 polls of one tenant made the gateway start a
thousand threads and open a thousand Redis connections, under one GIL, while another tenant's poll
and cancel waited seconds to be served (issue 41). Here a route that would wait hands the server its
wait instead (`frontdoor.stream_handle.DeferredWait`); the server waits here, then asks the route again
with no wait, so what a poll answers, and whose job it may see, stay the route's alone.

A job's done-list receives its element when the job ends and keeps it (contract/job_store.py reads it
the same way), so a job that ended between the route's read and this wait is seen at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from contract.keys import done_key
from contract.redis_client import STORE_ERRORS, AsyncRedis
from contract.time_limit import stop, within

log = logging.getLogger(__name__)

# Redis reads a blocking timeout of 0 as "forever": a watch with less than this left ends instead.
MIN_BLOCK_S = 0.01


@dataclass(slots=True)
class _Watch:
    """One job's blocking read, shared by every request waiting on it until the latest one's deadline."""

    ended: asyncio.Future[None]
    deadline: float
    task: asyncio.Task[None] | None = field(default=None)


class DoneWaits:
    """Waits on jobs' ends; `redis` holds one connection per job watched at once, so its pool is sized
    from the waits the server admits (SYNAPSE_GATEWAY_LONG_WAITS)."""

    def __init__(self, redis: AsyncRedis) -> None:
        self._redis = redis
        self._watches: dict[str, _Watch] = {}

    @property
    def watched(self) -> int:
        """Jobs with a blocking read open now."""
        return len(self._watches)

    async def until_ended(self, job_id: str, timeout_s: float) -> None:
        """Returns once the job has ended, or after timeout_s; raises the store's error when the read
        fails, as the route's own wait would (the server answers 503 with Retry-After)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        watch = self._watches.get(job_id)
        if watch is None:
            watch = _Watch(loop.create_future(), deadline)
            self._watches[job_id] = watch
            watch.task = asyncio.create_task(self._watch(job_id, watch), name=f"done-wait {job_id}")
        else:
            watch.deadline = max(watch.deadline, deadline)
        with contextlib.suppress(TimeoutError):
            await within(timeout_s, asyncio.shield(watch.ended))

    async def _watch(self, job_id: str, watch: _Watch) -> None:
        key = done_key(job_id)
        loop = asyncio.get_running_loop()
        failed: Exception | None = None
        try:
            while (left_s := watch.deadline - loop.time()) >= MIN_BLOCK_S:
                # Moving the element onto the same list leaves it there for every other reader.
                if await self._redis.blmove(key, key, left_s, "RIGHT", "LEFT") is not None:  # type: ignore[arg-type]
                    break
        except STORE_ERRORS as exc:
            log.warning("job %s: waiting for its end failed: %s", job_id, exc)
            failed = exc
        finally:
            # No await between the last read and this: a request that comes later starts a new watch.
            del self._watches[job_id]
            if not watch.ended.done():
                if failed is None:
                    watch.ended.set_result(None)
                else:
                    watch.ended.set_exception(failed)
                    watch.ended.exception()  # retrieved: a waiter that timed out already never reads it

    async def aclose(self) -> None:
        tasks = [watch.task for watch in self._watches.values()]
        await asyncio.gather(*(stop(task) for task in tasks), return_exceptions=True)
        await self._redis.aclose()
