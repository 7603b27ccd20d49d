"""Runs a one-shot model's jobs in batches: the batching policy cuts them, one Triton request each.

A batch in flight is bounded by its jobs' deadlines and by a generous multiple of the model's
measured batch time: a worker that hangs past it cannot hold them, and they are retried elsewhere.
Every job of a batch ends with an outcome written, whatever happens to the worker meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Sequence

from contract.catalog import ServedModel
from contract.jobs import CANCELLED_BY_CLIENT, Outcome, now_ms
from manager import aio, metrics, outcomes
from manager.batching import BatchPolicy
from manager.cost import CostLedger
from manager.fleet import Fleet, WorkerSlot
from manager.pool import BatchTimer
from manager.queue import Delivery, Waiting
from manager.runner import Runner
from manager.settler import Settler
from manager.triton import BatchError

log = logging.getLogger(__name__)

# A batch with no reply after this many times its model's measured batch time (for each batch that may
# be ahead of it on the worker), and never less than the floor, has a hung worker: it is retried elsewhere.
STALL_FACTOR = 10.0
STALL_FLOOR_S = 5.0


class OneShotRunner(Runner):
    """Batches of a model that answers a row per job (gpu-sim, classifiers)."""

    def __init__(
        self, model: str, config: ServedModel, fleet: Fleet, settler: Settler, ledger: CostLedger, *,
        max_wait_s: float,
    ) -> None:  # fmt: skip
        super().__init__()
        self.model = model
        self.config = config
        self.policy = BatchPolicy(max_batch_size=config.max_batch_size, max_wait_s=max_wait_s)
        self._fleet = fleet
        self._settler = settler
        self._ledger = ledger
        self._batch_time = BatchTimer()
        self._discarded: dict[str, str] = {}  # running jobs cancelled: their results are dropped

    def send(self, waiting: Waiting) -> float | None:
        """Cuts every batch the policy allows now."""
        policy = self.policy
        while waiting:
            slot = self._fleet.pick(self.model)
            decision = policy.decide(
                now=time.monotonic(),
                pending=self._pending(waiting.interactive, policy.max_batch_size),
                oldest_at=waiting.interactive[0].received_at if waiting.interactive else None,
                idle_worker=self._fleet.has_idle(self.model),
                free_slot=slot is not None,
                busy_until=self._fleet.busy_until(self.model),
                batch_pending=self._pending(waiting.batch, policy.max_batch_size),
                batch_oldest_at=waiting.batch[0].received_at if waiting.batch else None,
            )
            if decision.size == 0 or slot is None:
                return decision.wake_at
            batch = waiting.cut(decision)
            self.running.update((d.job.id, d) for d in batch)
            sent_at = self._fleet.acquire(slot, self._expected_s(batch))
            self.track(asyncio.create_task(self._run_batch(slot, batch, sent_at)))
        return None

    async def cancel(self, job_id: str, reason: str) -> bool:
        """A batch cannot be stopped midway: the job's row is dropped and it ends CANCELLED."""
        if job_id not in self.running:
            return False
        self._discarded[job_id] = reason
        return True

    async def _run_batch(self, slot: WorkerSlot, batch: list[Delivery], sent_at: float) -> None:
        """Runs one batch and writes every job's outcome, whatever happens to the worker meanwhile.

        Only a cancellation of this task (the manager shutting down) leaves outcomes unwritten; drain
        then hands the jobs back to the group for another manager.
        """
        started = now_ms()
        live = [d for d in batch if d.job.deadline_ms > started]
        done = [outcomes.overdue(d, started) for d in batch if d.job.deadline_ms <= started]
        dead = False
        jobs_done = 0
        try:
            if live:
                ran = await self._infer(slot, live, started)
                done += ran
                jobs_done = sum(1 for o in ran if o.batch_size)  # those sent: not the ones left out
        except TimeoutError:
            dead = self._after_timeout(slot, live, done)
        except Exception as exc:  # a batch task must never die holding jobs: they would never be retried
            dead = self._settler.after_failure(slot, live, exc, done)
        except asyncio.CancelledError:
            if aio.cancelling():
                raise  # shutdown: drain() hands these jobs back
            # The call was cancelled under us (the worker's channel closed as it left the pool).
            lost = BatchError("the worker's connection closed during the batch", worker_fault=True)
            dead = self._settler.after_failure(slot, live, lost, done)
        finally:
            own_s = self._fleet.release(slot, sent_at, jobs_done)
        if jobs_done:
            self._batch_time.observe(own_s / self._requests(batch))
        done = [self._unless_discarded(o, batch) for o in done]
        finished = {o.job_id for o in done}
        await self._settler.write([d for d in batch if d.job.id in finished], done, dead=dead)
        self.done_with(batch)
        for delivery in batch:
            self._discarded.pop(delivery.job.id, None)

    def _unless_discarded(self, outcome: Outcome, batch: Sequence[Delivery]) -> Outcome:
        """A job cancelled while its batch ran ends CANCELLED; what the model answered is dropped."""
        reason = self._discarded.get(outcome.job_id)
        if reason is None:
            return outcome
        delivery = next(d for d in batch if d.job.id == outcome.job_id)
        return outcomes.cancelled(delivery, reason, outcome.started_ms)

    def _after_timeout(self, slot: WorkerSlot, live: list[Delivery], done: list[Outcome]) -> bool:
        """No reply within the batch's bound: jobs past their deadline fail, the rest go elsewhere."""
        now = now_ms()
        overdue = [d for d in live if d.job.deadline_ms <= now]
        done += [outcomes.overdue(d, now, running=True) for d in overdue]
        waiting = [d for d in live if d.job.deadline_ms > now]
        log.warning("%s: no reply for a batch of %d on worker %s within its bound; %d jobs past their "
                    "deadline", self.model, len(live), slot.info.id, len(overdue))  # fmt: skip
        metrics.BATCH_FAILURES.labels(self.model, "timeout").inc()
        self._fleet.suspect(slot)
        if not waiting:
            return False
        stalled = BatchError("the worker did not answer within the batch's bound", worker_fault=True)
        return self._settler.after_failure(slot, waiting, stalled, done, counted=True)

    def _timeout_s(self, live: Sequence[Delivery]) -> float:
        """The bound of a batch in flight: the last of its jobs' deadlines (past it, every job of the
        batch has failed anyway), or sooner, a generous multiple of the model's measured batch time."""
        until_deadline = self._until_deadline_s(live)
        measured = self._batch_time.seconds
        if measured is None:  # no batch of this model has come back: a first load
            return until_deadline
        stalled = max(STALL_FLOOR_S, STALL_FACTOR * measured * self._fleet.max_inflight)
        return min(until_deadline, stalled)

    @staticmethod
    def _until_deadline_s(live: Sequence[Delivery]) -> float:
        return max(0.0, max(d.job.deadline_ms for d in live) / 1000 - time.time())

    def _expected_s(self, batch: Sequence[Delivery]) -> float | None:
        """How long the batch should take on its worker: the measured time of one request, for each."""
        measured = self._batch_time.seconds
        return None if measured is None else measured * self._requests(batch)

    def _pending(self, waiting: deque[Delivery], limit: int) -> int:
        """What waits, for the batching policy: jobs, a row each, counted without walking the queue on
        the batcher's hot path."""
        return len(waiting)

    def _requests(self, batch: Sequence[Delivery]) -> int:
        """Triton requests the batch goes as: one (it never passes max_batch_size)."""
        return 1

    async def _infer(self, slot: WorkerSlot, live: Sequence[Delivery], started: int) -> list[Outcome]:
        """Marks the jobs RUNNING first, one round trip, so that a job cancelled after this manager read it
        is never sent to the worker; then runs the rest."""
        async with asyncio.timeout(self._timeout_s(live)):
            stop = await self._settler.mark_running([d.job for d in live], started, slot.info.id)
            runnable = [d for d in live if d.job.id not in stop]
            done = [outcomes.cancelled(d, CANCELLED_BY_CLIENT, started) for d in live if d.job.id in stop]
            if not runnable:
                return done
            ran = await self._results(slot, runnable, started)
        # Every outcome of the batch carries its rows (batch_size: texts or jobs) and its end.
        rows, seconds = ran[0].batch_size, (ran[0].completed_ms - started) / 1000
        metrics.record_batch(self.model, rows, seconds)
        # The cost ledger's batch-of-one estimate wants single requests: a batch sent as several counts
        # as that many of its mean size.
        requests = self._requests(runnable)
        for _ in range(requests):
            self._ledger.observe_batch(self.model, math.ceil(rows / requests), seconds / requests)
        return done + ran

    async def _results(self, slot: WorkerSlot, runnable: Sequence[Delivery], started: int) -> list[Outcome]:
        """The model's answers, a row per job, in one request."""
        jobs = [d.job for d in runnable]
        rows = await slot.client.infer(self.model, [j.prompt for j in jobs], [j.max_tokens for j in jobs])
        finished = now_ms()
        return [
            outcomes.from_row(d, row, started_ms=started, completed_ms=finished, size=len(runnable))
            for d, row in zip(runnable, rows, strict=True)
        ]
