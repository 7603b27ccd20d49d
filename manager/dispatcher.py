"""Moves one model's jobs from its stream to the workers, a batch at a time, losing none.

Loops share two in-memory buffers, one per priority: the reader fills both from the model's two
streams in one read; the dispatch loop asks the batching policy when to cut a batch (interactive
jobs first, topped up with batch jobs); one task per batch runs it and writes its outcomes; the
upkeep loop renews this manager's claim on what it holds, takes over jobs of managers that died,
moves batch jobs past half their time to the front of the interactive buffer, and fails jobs whose
deadline passed while they waited. The batch buffer holds a batch per worker, no more: what it
leaves in the stream any manager can take. A batch in flight is bounded by its jobs' deadlines: a
worker that hangs past them cannot hold them.

The batching window runs on this manager's own clock, from when it read each job, so clock skew
between the front door and the manager cannot move it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from typing import TypeVar

from redis.exceptions import ResponseError

from contract.jobs import CANCELLED_BY_CLIENT, Job, JobStatus, Outcome, Priority, now_ms
from contract.redis_client import STORE_ERRORS
from manager import metrics, outcomes
from manager.batching import BatchPolicy
from manager.cost import CostLedger
from manager.fleet import Fleet, WorkerSlot
from manager.generation import CLIENT_GONE, Generations, cancelled, cancelling
from manager.pool import BatchTimer, RetryRule
from manager.queue import Delivery, JobQueue, Waiting, head_rows
from manager.triton import BatchError, ModelConfig

log = logging.getLogger(__name__)

T = TypeVar("T")

READ_BLOCK_MS = 1000
# A read that leaves out a full buffer's stream blocks only this long, so that the stream is read again
# soon after its buffer has room (a blocked XREADGROUP cannot be widened).
PARTIAL_READ_BLOCK_MS = 20
DEFAULT_READ_COUNT = 128
UPKEEP_S = 0.5
MAX_IDLE_S = 1.0
# A batch with no reply after this many times its model's measured batch time (for each batch that may
# be ahead of it on the worker), and never less than the floor, has a hung worker: it is retried elsewhere.
STALL_FACTOR = 10.0
STALL_FLOOR_S = 5.0
RELEASE_IDLE_FACTOR = 10  # a released entry looks idle for ten reclaim periods: taken over at once
BACKOFF_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)


async def with_backoff(what: str, call: Callable[[], Awaitable[T]]) -> T:
    """Retries a Redis call until it succeeds: outcomes in hand must survive a Redis restart."""
    for attempt in range(1_000_000):
        try:
            return await call()
        except STORE_ERRORS as exc:
            delay = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
            log.warning("%s failed (%s); retrying in %.2f s", what, exc, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


class ModelDispatcher:
    def __init__(
        self, model: str, queue: JobQueue, fleet: Fleet, ledger: CostLedger, *, max_wait_s: float,
        max_attempts: int, reclaim_idle_s: float,
    ) -> None:  # fmt: skip
        self.model = model
        self._queue = queue
        self._fleet = fleet
        self._ledger = ledger
        self._max_wait_s = max_wait_s
        self._max_attempts = max_attempts
        self._retry_rule = RetryRule(max_attempts)
        self._reclaim_idle_ms = int(reclaim_idle_s * 1000)
        self._lease_s = reclaim_idle_s / 4
        self._policy: BatchPolicy | None = None
        self._config: ModelConfig | None = None
        self._rows_per_job = 1.0  # recent reads' mean rows per job (embedding jobs carry several)
        self.generations: Generations | None = None  # a generative model's runner, once its config is read
        self._batch_time = BatchTimer()
        self._waiting = Waiting()
        self._running: dict[str, Delivery] = {}  # by job id: entry ids of the two streams may be equal
        self._discarded: dict[str, str] = {}  # running one-shot jobs cancelled: their results are dropped
        self._changed = asyncio.Event()
        self._batches: set[asyncio.Task[None]] = set()
        self._loops: dict[str, asyncio.Task[None]] = {}

    def poke(self) -> None:
        """Something changed (a worker joined, a batch finished): look at the queue again."""
        self._changed.set()

    @property
    def backlog(self) -> int:
        """Interactive jobs this manager holds that have not started: the latency budget's concern."""
        return self._waiting.backlog

    @property
    def batch_backlog(self) -> int:
        """Batch jobs this manager holds that have not started, promoted ones included."""
        return len(self._waiting.interactive) + len(self._waiting.batch) - self._waiting.backlog

    def track(self, task: asyncio.Task[None]) -> None:
        """A task that holds jobs until it writes their outcomes: drain waits for it or cancels it."""
        self._batches.add(task)
        task.add_done_callback(self._batches.discard)

    async def cancel(self, job_id: str, reason: str = CLIENT_GONE) -> None:
        """A client asked to stop the job: a waiting job ends CANCELLED now, a running one is stopped."""
        if self.generations is not None and self.generations.cancel(job_id, reason):
            return
        waiting = self._waiting.take(job_id)
        if waiting is not None:
            await self.write([waiting], [cancelled(waiting, reason, now_ms())])
        elif job_id in self._running:
            self._discarded[job_id] = reason  # a one-shot batch cannot be stopped midway: its row is dropped

    async def start(self) -> None:
        await with_backoff(
            f"{self.model}: create consumer group", lambda: self._queue.ensure_group(self.model)
        )
        for name, loop in (
            ("read", self._read_loop),
            ("dispatch", self._dispatch_loop),
            ("upkeep", self._upkeep),
        ):
            self._loops[name] = asyncio.create_task(loop(), name=f"{name}:{self.model}")

    async def stop_intake(self) -> None:
        for name in ("read", "upkeep"):
            await _cancel(self._loops.get(name))

    async def drain(self, timeout_s: float) -> None:
        """Runs what was read while workers allow (up to timeout_s), then hands the rest back.

        A generative model starts nothing new: a generation takes seconds, and one cut off at the
        timeout would cost its job an attempt; its waiting jobs go back to the group at once."""
        deadline = time.monotonic() + timeout_s
        generative = self.generations is not None
        if generative:
            await _cancel(self._loops.get("dispatch"))
        while (self._batches or (self._waiting and not generative)) and time.monotonic() < deadline:
            if not self._batches and not self._fleet.serving(self.model):
                break  # no worker to run them: hand them back rather than wait
            self.poke()
            await asyncio.sleep(0.05)
        await _cancel(self._loops.get("dispatch"))
        for task in list(self._batches):
            await _cancel(task)
        with contextlib.suppress(*STORE_ERRORS):
            # What Redis still lists under this manager: what it held, and what a read cut short by
            # stop_intake delivered but never handed over.
            leftover = await self._queue.held(self.model)
            if any(leftover.values()):
                count = sum(map(len, leftover.values()))
                log.info("%s: handing %d unfinished jobs back to the group", self.model, count)
                await self._queue.release(self.model, leftover, self._reclaim_idle_ms * RELEASE_IDLE_FACTOR)

    def _rooms(self) -> dict[Priority, int]:
        """What each buffer can take, in rows, for the streams worth reading now.

        Interactive: two batches per batch slot. Batch: a batch per worker, read only once a whole
        batch fits (one XREADGROUP has one COUNT for its streams: a read of a few batch jobs would
        read as few interactive ones). An embedding model's buffers count texts, so that jobs of many
        texts cannot pile up in one manager (where they would wait while others sit idle)."""
        max_batch = self._policy.max_batch_size if self._policy else DEFAULT_READ_COUNT
        workers = max(1, len(self._fleet.serving(self.model)))
        held = _rows if self._embeds else len
        interactive = max_batch * self._fleet.max_inflight * workers * 2 - held(self._waiting.interactive)
        batch = max_batch * workers - held(self._waiting.batch)
        rooms: dict[Priority, int] = {}
        if interactive > 0:
            rooms[Priority.INTERACTIVE] = interactive
        if batch >= max_batch:
            rooms[Priority.BATCH] = batch
        return rooms

    def _read_count(self, rooms: dict[Priority, int]) -> int:
        """Entries to read for this much room: rows over the rows per job seen lately (1 for a model
        whose jobs are one row each), so that one read of large embedding jobs stays near the room."""
        return max(1, int(min(rooms.values()) / self._rows_per_job))

    def _observe_rows(self, deliveries: Sequence[Delivery]) -> None:
        mean = sum(d.job.rows for d in deliveries) / len(deliveries)
        self._rows_per_job = max(1.0, (self._rows_per_job + mean) / 2)

    async def _read_loop(self) -> None:
        failures = 0
        while True:
            rooms = self._rooms()
            if not rooms:
                await asyncio.sleep(0.005)
                continue
            block_ms = READ_BLOCK_MS if len(rooms) == len(Priority) else PARTIAL_READ_BLOCK_MS
            try:
                deliveries = await self._queue.read(
                    self.model, count=self._read_count(rooms), block_ms=block_ms, priorities=list(rooms)
                )
                failures = 0
            except STORE_ERRORS as exc:
                if isinstance(exc, ResponseError) and "NOGROUP" in str(exc):
                    await self._queue.ensure_group(self.model)  # Redis came back without our group
                failures += 1
                delay = BACKOFF_S[min(failures, len(BACKOFF_S) - 1)]
                log.warning("%s: reading the stream failed (%s); retrying in %.2f s", self.model, exc, delay)
                await asyncio.sleep(delay)
                continue
            if deliveries:
                if self._embeds:
                    self._observe_rows(deliveries)
                self._waiting.add(deliveries)
                self.poke()

    async def _upkeep(self) -> None:
        last_lease = 0.0
        while True:
            await asyncio.sleep(UPKEEP_S)
            try:
                if self._waiting.promote(now_ms()):
                    self.poke()
                await self._expire_overdue()
                if time.monotonic() - last_lease >= self._lease_s:
                    last_lease = time.monotonic()
                    await self._renew_and_reclaim()
            except STORE_ERRORS as exc:
                log.warning("%s: upkeep failed (%s); will retry", self.model, exc)

    async def _expire_overdue(self) -> None:
        now = now_ms()
        overdue = self._waiting.take_overdue(now)
        if overdue:
            await self.write(overdue, [outcomes.overdue(d, now) for d in overdue])

    async def _renew_and_reclaim(self) -> None:
        held: dict[Priority, list[str]] = {p: [] for p in Priority}
        for d in (*self._waiting, *self._running.values()):
            held[d.job.priority].append(d.entry_id)
        await self._queue.touch(self.model, held)
        reclaimed = await self._queue.reclaim(self.model, self._reclaim_idle_ms)
        if not reclaimed:
            return
        log.info("%s: took over %d jobs from a manager that stopped", self.model, len(reclaimed))
        exhausted = [d for d in reclaimed if d.attempt > self._max_attempts]
        if exhausted:
            reason = "its manager stopped while it ran"
            await self.write(
                exhausted, [outcomes.exhausted(d, reason, now_ms()) for d in exhausted], dead=True
            )
        self._waiting.requeue([d for d in reclaimed if d.attempt <= self._max_attempts])
        self.poke()

    async def _ensure_policy(self) -> BatchPolicy | None:
        if self._policy is None:
            slot = next(iter(self._fleet.serving(self.model)), None)
            if slot is None:
                await self._fleet.ensure_loaded(self.model)
                return None
            try:
                config = await slot.client.model_config(self.model)
            except Exception as exc:  # the worker may be going away; the next poke tries another
                log.warning("%s: could not read its config from %s: %s", self.model, slot.info.id, exc)
                return None
            if config.decoupled:
                self.generations = Generations(
                    self.model, config, self._fleet, redis=self._queue.redis, job_ttl_s=self._queue.job_ttl_s,
                    host=self,
                )  # fmt: skip
                await self.generations.publish_limits()
                log.info("%s: generative, up to %d sequences per worker", self.model, config.max_num_seqs)
            else:
                log.info("%s: max_batch_size %d from Triton, window %.0f ms", self.model,
                         config.max_batch_size, self._max_wait_s * 1e3)  # fmt: skip
            self._config = config
            self._policy = BatchPolicy(max_batch_size=config.max_batch_size, max_wait_s=self._max_wait_s)
        return self._policy

    async def _dispatch_loop(self) -> None:
        while True:
            self._changed.clear()
            wake_at = await self._dispatch_ready()
            # Events wake the loop; the cap only bounds the cost of a wake-up that never comes. Not wait_for:
            # on 3.11 it swallows a cancellation that meets a poke, and drain would wait for the loop forever.
            timeout = MAX_IDLE_S if wake_at is None else min(MAX_IDLE_S, max(0.0, wake_at - time.monotonic()))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._changed.wait()

    async def _dispatch_ready(self) -> float | None:
        """Cuts every batch the policy allows now; returns when to look again (None: on the next event)."""
        policy = await self._ensure_policy() if self._waiting else self._policy
        if self._waiting and policy is not None and not self._fleet.serving(self.model):
            await self._fleet.ensure_loaded(self.model)  # its worker went away: find it another
        if self.generations is not None:
            self.generations.dispatch(self._waiting.interactive, self._running)
            if not self._waiting.interactive:  # batch jobs take the sequence slots interactive ones leave
                self.generations.dispatch(self._waiting.batch, self._running)
            return None
        while policy is not None and self._waiting:
            slot = self._fleet.pick(self.model)
            decision = policy.decide(
                now=time.monotonic(),
                pending=self._pending(self._waiting.interactive, policy.max_batch_size),
                oldest_at=self._waiting.interactive[0].received_at if self._waiting.interactive else None,
                idle_worker=self._fleet.has_idle(self.model),
                free_slot=slot is not None,
                busy_until=self._fleet.busy_until(self.model),
                batch_pending=self._pending(self._waiting.batch, policy.max_batch_size),
                batch_oldest_at=self._waiting.batch[0].received_at if self._waiting.batch else None,
            )
            if decision.size == 0 or slot is None:
                return decision.wake_at
            batch = self._waiting.cut(decision)
            self._running.update((d.job.id, d) for d in batch)
            sent_at = self._fleet.acquire(slot, self._expected_s(batch))
            self.track(asyncio.create_task(self._run_batch(slot, batch, sent_at)))
        return None

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
            dead = self.after_failure(slot, live, exc, done)
        except asyncio.CancelledError:
            if cancelling():
                raise  # shutdown: drain() hands these jobs back
            # The call was cancelled under us (the worker's channel closed as it left the pool).
            lost = BatchError("the worker's connection closed during the batch", worker_fault=True)
            dead = self.after_failure(slot, live, lost, done)
        finally:
            own_s = self._fleet.release(slot, sent_at, jobs_done)
        if jobs_done:
            self._batch_time.observe(own_s / self._requests(batch))
        done = [self._unless_discarded(o, batch) for o in done]
        finished = {o.job_id for o in done}
        await self.write([d for d in batch if d.job.id in finished], done, dead=dead)
        for delivery in batch:
            if self._running.get(delivery.job.id) is delivery:  # a retry may run by now
                del self._running[delivery.job.id]
            self._discarded.pop(delivery.job.id, None)

    def _unless_discarded(self, outcome: Outcome, batch: Sequence[Delivery]) -> Outcome:
        """A job cancelled while its batch ran ends CANCELLED; what the model answered is dropped."""
        reason = self._discarded.get(outcome.job_id)
        if reason is None:
            return outcome
        delivery = next(d for d in batch if d.job.id == outcome.job_id)
        return cancelled(delivery, reason, outcome.started_ms)

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
        return self.after_failure(slot, waiting, stalled, done, counted=True)

    def after_failure(
        self, slot: WorkerSlot, jobs: list[Delivery], exc: Exception, done: list[Outcome], *,
        counted: bool = False,
    ) -> bool:  # fmt: skip
        """A failed batch: jobs out of attempts fail (appended to done); the rest go back to the queue.

        A worker fault sends the batch elsewhere; a model error sends each job alone, to find the
        culprit (`RetryRule`). Returns whether any job was given up, for the dead-letter stream.
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
            self.poke()
        return bool(plan.give_up)

    def _batch_timeout_s(self, live: Sequence[Delivery]) -> float:
        """The bound of a batch in flight: the last of its jobs' deadlines (past it, every job of the
        batch has failed anyway), or sooner, a generous multiple of the model's measured batch time.

        Not for an embedding model: its pass takes as long as its texts are (64 sentences or 64 texts
        of 256 tokens differ fifty-fold on a CPU), which no measured time tells; each of its requests is
        bounded by its own timeout (SYNAPSE_TRITON_TIMEOUT_S) instead."""
        until_deadline = max(0.0, max(d.job.deadline_ms for d in live) / 1000 - time.time())
        measured = self._batch_time.seconds
        if measured is None or self._embeds:  # or no batch of this model has come back: a first load
            return until_deadline
        stalled = max(STALL_FLOOR_S, STALL_FACTOR * measured * self._fleet.max_inflight)
        return min(until_deadline, stalled)

    def _expected_s(self, batch: Sequence[Delivery]) -> float | None:
        """How long the batch should take on its worker: the measured time of one request, for each."""
        measured = self._batch_time.seconds
        return None if measured is None else measured * self._requests(batch)

    @property
    def _embeds(self) -> bool:
        return self._config is not None and self._config.embedding

    def _pending(self, waiting: deque[Delivery], limit: int) -> int:
        """What waits, for the batching policy: rows for an embedding model (`head_rows`), else jobs, a
        row each, counted without walking the queue on the batcher's hot path."""
        return head_rows(waiting, limit) if self._embeds else len(waiting)

    def _requests(self, live: Sequence[Delivery]) -> int:
        """Triton requests the batch goes as: its rows over the model's max_batch_size, rounded up (one
        for any other model's batch, which never passes max_batch_size)."""
        if self._policy is None or not self._embeds:
            return 1
        rows = sum(d.job.rows for d in live)
        return max(1, math.ceil(rows / self._policy.max_batch_size))

    async def _infer(self, slot: WorkerSlot, live: Sequence[Delivery], started: int) -> list[Outcome]:
        """Marks the jobs RUNNING first, one round trip, so that a job cancelled after this manager read it
        is never sent to the worker; then runs the rest as one request (an embedding batch larger than
        the model's max_batch_size: as several)."""
        async with asyncio.timeout(self._batch_timeout_s(live)):
            stop = await self.mark_running([d.job for d in live], started, slot.info.id)
            runnable = [d for d in live if d.job.id not in stop]
            done = [cancelled(d, CANCELLED_BY_CLIENT, started) for d in live if d.job.id in stop]
            if not runnable:
                return done
            if self._embeds:
                ran = await self._embed(slot, runnable, started)
            else:
                ran = await self._answer(slot, runnable, started)
        # Every outcome of the batch carries its rows (batch_size: texts or jobs) and its end.
        rows, seconds = ran[0].batch_size, (ran[0].completed_ms - started) / 1000
        metrics.record_batch(self.model, rows, seconds)
        # The cost ledger's batch-of-one estimate wants single requests: a batch sent as several counts
        # as that many of its mean size.
        requests = self._requests(runnable)
        for _ in range(requests):
            self._ledger.observe_batch(self.model, math.ceil(rows / requests), seconds / requests)
        return done + ran

    async def _answer(self, slot: WorkerSlot, runnable: Sequence[Delivery], started: int) -> list[Outcome]:
        """A one-shot model's answers, a row per job."""
        jobs = [d.job for d in runnable]
        rows = await slot.client.infer(self.model, [j.prompt for j in jobs], [j.max_tokens for j in jobs])
        finished = now_ms()
        return [
            outcomes.from_row(d, row, started_ms=started, completed_ms=finished, size=len(runnable))
            for d, row in zip(runnable, rows, strict=True)
        ]

    async def _embed(self, slot: WorkerSlot, runnable: Sequence[Delivery], started: int) -> list[Outcome]:
        """An embedding model's vectors: every text of the batch's jobs in one call, split back per job."""
        assert self._config is not None and self._policy is not None
        texts = [text for d in runnable for text in d.job.texts]
        embedded = await slot.client.embed(self.model, texts, self._policy.max_batch_size)
        finished = now_ms()
        found: list[Outcome] = []
        start = 0
        for delivery in runnable:
            rows = embedded.rows(start, start + delivery.job.rows)
            start += delivery.job.rows
            outcome = outcomes.from_embedded(
                delivery, rows, window=self._config.max_model_len, started_ms=started, completed_ms=finished,
                size=len(texts),
            )  # fmt: skip
            found.append(outcome)
        return found

    async def mark_running(self, jobs: Sequence[Job], started: int, worker_id: str) -> set[str]:
        """Best effort: if Redis is away the job shows QUEUED until its outcome is written. Returns the
        jobs whose client asked to cancel them."""
        try:
            return await self._queue.mark_running(jobs, started, worker_id)
        except STORE_ERRORS as exc:
            log.warning("%s: could not mark %d jobs RUNNING: %s", self.model, len(jobs), exc)
            return set()

    async def write(
        self, deliveries: Sequence[Delivery], done: Sequence[Outcome], dead: bool = False
    ) -> None:
        """Writes the outcomes and counts those written: a job cancelled meanwhile keeps its CANCELLED."""
        if not done:
            return
        entries = {d.job.id: (d.entry_id, d.job) for d in deliveries}
        dead_ids = (
            frozenset(o.job_id for o in done if o.error_code == outcomes.MAX_ATTEMPTS_EXCEEDED)
            if dead
            else frozenset()
        )
        written = await with_backoff(
            f"{self.model}: writing {len(done)} outcomes",
            lambda: self._queue.complete(self.model, done, entries, dead_ids),
        )
        ended = [o for o in done if o.job_id in written]
        metrics.record_outcomes(
            self.model, ended, {d.job.id: d.job.created_ms for d in deliveries},
            end_to_end=self.generations is None,
        )  # fmt: skip
        completed = [o for o in ended if o.status is JobStatus.COMPLETED]
        if completed:
            self._ledger.complete(self.model, len(completed), sum(o.inferences for o in completed))


def _rows(waiting: Iterable[Delivery]) -> int:
    return sum(d.job.rows for d in waiting)


async def _cancel(task: asyncio.Task[None] | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
