"""Every write of a model's job state by this manager: RUNNING, the outcome, and the failure rule.

Runners and the dispatcher's loops decide what happened to a job; the settler is the one place that
writes it to Redis (acknowledging the stream entry in the same script), counts it in the metrics and
the cost ledger, and sends a failed job back to the buffer or gives it up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace

from contract.jobs import Job, JobStatus, Outcome, now_ms
from contract.redis_client import STORE_ERRORS
from manager import metrics, outcomes
from manager.aio import with_backoff
from manager.cost import CostLedger
from manager.fleet import Fleet, WorkerSlot
from manager.pool import RetryRule
from manager.queue import Delivery, JobQueue, Waiting
from manager.triton import BatchError

log = logging.getLogger(__name__)


class Settler:
    """Writes one model's jobs' states; a failed job goes back to `waiting` (and `wake` is set).

    end_to_end: whether the model's jobs count in the end-to-end latency objective (a generation's
    objective is its time to first token instead).
    """

    def __init__(
        self, model: str, queue: JobQueue, fleet: Fleet, ledger: CostLedger, *, waiting: Waiting,
        wake: asyncio.Event, max_attempts: int, end_to_end: bool,
    ) -> None:  # fmt: skip
        self.model = model
        self.end_to_end = end_to_end
        self._queue = queue
        self._fleet = fleet
        self._ledger = ledger
        self._waiting = waiting
        self._wake = wake
        self._retry_rule = RetryRule(max_attempts)
        # Jobs started while Redis was away, by the worker they run on: their run is recorded with their
        # outcome instead, so no job ends with `runs` 0 and no worker named.
        self._unmarked: dict[str, str] = {}

    async def mark_running(self, jobs: Sequence[Job], started: int, worker_id: str) -> set[str]:
        """Best effort: if Redis is away the job shows QUEUED until its outcome is written, which records
        the run then. Returns the jobs whose client asked to cancel them (or that ended already): they
        must not run."""
        try:
            asked = await self._queue.mark_running(jobs, started, worker_id)
        except STORE_ERRORS as exc:
            log.warning("%s: could not mark %d jobs RUNNING: %s", self.model, len(jobs), exc)
            self._unmarked.update((job.id, worker_id) for job in jobs)
            return set()
        if self._unmarked:  # rare: only after Redis was away; the hot path does nothing more
            for job in jobs:
                self._unmarked.pop(job.id, None)
        return asked

    async def write(
        self, deliveries: Sequence[Delivery], done: Sequence[Outcome], dead: bool = False
    ) -> None:
        """Writes the outcomes and counts those written: a job cancelled meanwhile keeps its CANCELLED.
        `dead`: some were given up, and go to the dead-letter stream too."""
        if not done:
            return
        entries = {d.job.id: (d.entry_id, d.job) for d in deliveries}
        dead_ids = (
            frozenset(o.job_id for o in done if o.error_code == outcomes.MAX_ATTEMPTS_EXCEEDED)
            if dead
            else frozenset()
        )
        unmarked = (
            {o.job_id: self._unmarked.pop(o.job_id) for o in done if o.job_id in self._unmarked}
            if self._unmarked
            else {}
        )
        written = await with_backoff(
            f"{self.model}: writing {len(done)} outcomes",
            lambda: self._queue.complete(self.model, done, entries, dead_ids, unmarked),
        )
        ended = [o for o in done if o.job_id in written]
        metrics.record_outcomes(
            self.model, ended, {d.job.id: d.job.created_ms for d in deliveries}, end_to_end=self.end_to_end
        )
        completed = [o for o in ended if o.status is JobStatus.COMPLETED]
        if completed:
            self._ledger.complete(self.model, len(completed), sum(o.inferences for o in completed))

    def after_failure(
        self, slot: WorkerSlot, jobs: list[Delivery], exc: Exception, done: list[Outcome], *,
        counted: bool = False,
    ) -> bool:  # fmt: skip
        """A failed batch or sequence: jobs out of attempts fail (appended to done); the rest go back to
        the front of the buffer.

        A worker fault sends the batch elsewhere; a model error sends each job alone, to find the
        culprit (`RetryRule`). `counted`: the failure is in the metrics already. Returns whether any job
        was given up, for the dead-letter stream.
        """
        worker_fault = not isinstance(exc, BatchError) or exc.worker_fault
        if isinstance(exc, BatchError):
            log.warning("%s: batch of %d on worker %s failed: %s", self.model, len(jobs), slot.info.id, exc)
        else:
            log.error("%s: batch of %d on worker %s broke", self.model, len(jobs), slot.info.id, exc_info=exc)
        if not counted:
            metrics.BATCH_FAILURES.labels(self.model, "worker_fault" if worker_fault else "model_error").inc()
        if worker_fault:
            self._fleet.suspect(slot)
        plan = self._retry_rule.after_failure([d.attempt for d in jobs], worker_fault=worker_fault)
        now = now_ms()
        done += [outcomes.exhausted(jobs[i], str(exc), now) for i in plan.give_up]
        retried = [jobs[i] for i in plan.retry]
        self._waiting.requeue(
            [replace(d, attempt=d.attempt + 1, alone=plan.alone or d.alone) for d in retried]
        )
        if retried:
            self._wake.set()
        return bool(plan.give_up)
