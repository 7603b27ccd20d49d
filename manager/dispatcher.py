"""Moves one model's jobs from its stream to the workers, a batch at a time.

Three small loops share one in-memory buffer: the reader fills it from the consumer group, the
dispatch loop asks the batching policy when to cut a batch, and one task per batch runs it on a
worker and writes the outcomes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence

from manager import metrics
from manager.batching import BatchPolicy
from manager.fleet import Fleet, WorkerSlot
from manager.jobs import JobStatus, Outcome, now_ms
from manager.queue import Delivery, JobQueue
from manager.triton import BatchError, RowResult

log = logging.getLogger(__name__)

READ_BLOCK_MS = 1000
DEFAULT_READ_COUNT = 128


def completed(delivery: Delivery, row: RowResult, started_ms: int, completed_ms: int, size: int) -> Outcome:
    if row.error:
        return failed(
            delivery, "model_error", row.error, started_ms=started_ms, completed_ms=completed_ms, size=size
        )
    return Outcome(
        job_id=delivery.job.id,
        status=JobStatus.COMPLETED,
        started_ms=started_ms,
        completed_ms=completed_ms,
        batch_size=size,
        text=row.text,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
    )


def failed(
    delivery: Delivery, code: str, message: str, *, started_ms: int, completed_ms: int, size: int
) -> Outcome:
    return Outcome(
        job_id=delivery.job.id,
        status=JobStatus.FAILED,
        started_ms=started_ms,
        completed_ms=completed_ms,
        batch_size=size,
        error_code=code,
        error_message=message,
    )


class ModelDispatcher:
    def __init__(
        self, model: str, queue: JobQueue, fleet: Fleet, *, max_wait_s: float, max_attempts: int = 3
    ) -> None:
        self.model = model
        self._queue = queue
        self._fleet = fleet
        self._max_wait_s = max_wait_s
        self._max_attempts = max_attempts
        self._policy: BatchPolicy | None = None
        self._pending: deque[Delivery] = deque()
        self._attempts: dict[str, int] = {}
        self._changed = asyncio.Event()
        self._batches: set[asyncio.Task[None]] = set()
        self._reader: asyncio.Task[None] | None = None
        self._dispatcher: asyncio.Task[None] | None = None

    def poke(self) -> None:
        """Something changed (a worker joined, a batch finished): look at the queue again."""
        self._changed.set()

    async def start(self) -> None:
        await self._queue.ensure_group(self.model)
        self._reader = asyncio.create_task(self._read_loop(), name=f"read:{self.model}")
        self._dispatcher = asyncio.create_task(self._dispatch_loop(), name=f"dispatch:{self.model}")

    async def stop_intake(self) -> None:
        await _cancel(self._reader)

    async def drain(self, timeout_s: float) -> None:
        """Runs what was already read, waits for batches in flight, then stops the dispatch loop."""
        deadline = time.monotonic() + timeout_s
        while (self._pending or self._batches) and time.monotonic() < deadline:
            self.poke()
            await asyncio.sleep(0.05)
        await _cancel(self._dispatcher)
        for task in list(self._batches):
            await _cancel(task)

    @property
    def backlog(self) -> int:
        return len(self._pending)

    def _buffer_limit(self) -> int:
        max_batch = self._policy.max_batch_size if self._policy else DEFAULT_READ_COUNT
        return max_batch * self._fleet.max_inflight * max(1, len(self._fleet.serving(self.model))) * 2

    async def _read_loop(self) -> None:
        while True:
            room = self._buffer_limit() - len(self._pending)
            if room <= 0:
                await asyncio.sleep(0.005)
                continue
            deliveries = await self._queue.read(self.model, count=room, block_ms=READ_BLOCK_MS)
            if deliveries:
                self._pending.extend(deliveries)
                self.poke()

    async def _ensure_policy(self) -> BatchPolicy | None:
        if self._policy is None:
            slot = next(iter(self._fleet.serving(self.model)), None)
            if slot is None:
                return None
            max_batch = await slot.client.max_batch_size(self.model)
            self._policy = BatchPolicy(max_batch_size=max_batch, max_wait_s=self._max_wait_s)
            log.info(
                "model %s: max_batch_size %d from Triton, window %.0f ms",
                self.model,
                max_batch,
                self._max_wait_s * 1000,
            )
        return self._policy

    async def _dispatch_loop(self) -> None:
        while True:
            self._changed.clear()
            wake_at = await self._dispatch_ready()
            timeout = None if wake_at is None else max(0.0, wake_at - time.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    async def _dispatch_ready(self) -> float | None:
        """Cuts every batch the policy allows now; returns when to look again (None: on the next event)."""
        policy = await self._ensure_policy() if self._pending else self._policy
        while policy is not None and self._pending:
            slot = self._fleet.pick(self.model)
            decision = policy.decide(
                now=time.time(),
                pending=len(self._pending),
                oldest_at=self._pending[0].job.created_ms / 1000,
                idle_worker=self._fleet.has_idle(self.model),
                free_slot=slot is not None,
            )
            if decision.take == 0 or slot is None:
                return decision.wake_at
            batch = [self._pending.popleft() for _ in range(decision.take)]
            slot.inflight += 1
            task = asyncio.create_task(self._run_batch(slot, batch))
            self._batches.add(task)
            task.add_done_callback(self._batches.discard)
        return None

    async def _run_batch(self, slot: WorkerSlot, batch: list[Delivery]) -> None:
        started = now_ms()
        live = [d for d in batch if d.job.deadline_ms > started]
        outcomes = [
            failed(
                d,
                "deadline_exceeded",
                "the job's deadline passed before it ran",
                started_ms=started,
                completed_ms=started,
                size=0,
            )
            for d in batch
            if d.job.deadline_ms <= started
        ]
        try:
            if live:
                outcomes += await self._infer(slot, live, started)
        except BatchError as exc:
            log.warning("batch of %d on worker %s failed: %s", len(live), slot.info.id, exc)
            outcomes += self._retry_or_fail(live, str(exc), started)
        finally:
            slot.inflight -= 1
            self.poke()
        if outcomes:
            entry_of = {d.job.id: d.entry_id for d in batch}
            await self._queue.complete(self.model, outcomes, [entry_of[o.job_id] for o in outcomes])
            metrics.record_outcomes(self.model, outcomes, {d.job.id: d.job.created_ms for d in batch})

    async def _infer(self, slot: WorkerSlot, live: Sequence[Delivery], started: int) -> list[Outcome]:
        jobs = [d.job for d in live]
        _, rows = await asyncio.gather(
            self._queue.mark_running(jobs, started),
            slot.client.infer(self.model, [j.prompt for j in jobs], [j.max_tokens for j in jobs]),
        )
        finished = now_ms()
        metrics.record_batch(self.model, len(live), (finished - started) / 1000)
        return [completed(d, row, started, finished, len(live)) for d, row in zip(live, rows, strict=True)]

    def _retry_or_fail(self, live: Sequence[Delivery], reason: str, started: int) -> list[Outcome]:
        """Puts the batch back at the head of the queue, or fails the jobs that used up their attempts."""
        outcomes: list[Outcome] = []
        retry: list[Delivery] = []
        for delivery in live:
            attempts = self._attempts.get(delivery.job.id, 1)
            if attempts >= self._max_attempts:
                message = f"failed on {attempts} attempts; last error: {reason}"
                outcomes.append(
                    failed(
                        delivery,
                        "max_attempts_exceeded",
                        message,
                        started_ms=started,
                        completed_ms=now_ms(),
                        size=len(live),
                    )
                )
                self._attempts.pop(delivery.job.id, None)
            else:
                self._attempts[delivery.job.id] = attempts + 1
                retry.append(delivery)
        self._pending.extendleft(reversed(retry))
        return outcomes


async def _cancel(task: asyncio.Task[None] | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
