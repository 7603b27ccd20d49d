"""Runs a generative model's jobs: each one sent on arrival to a worker's continuous-batching engine.

There is no batch window: the engine batches at every decoding step, so a job goes at once to the
READY worker with the fewest of the model's sequences running, as long as one is under the model's
budget (`max_num_seqs` in its Triton config); the rest wait in the queue, where the autoscaler sees
them. The worker streams the text back over gRPC; `TokenRelay` appends it to the job's token stream
in Redis in small groups, and the outcome is written as for any job when the engine says it ended.

A client that goes away cancels its job (`cancel`): the gRPC stream is cancelled, Triton cancels the
request, and the engine drops the sequence at its next step.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from contract import tokens
from contract.jobs import CANCELLED_CODE, Job, JobStatus, Outcome, now_ms
from contract.keys import limits_key, tokens_key
from contract.redis_client import STORE_ERRORS, AsyncRedis
from manager import metrics, outcomes
from manager.fleet import Fleet, WorkerSlot
from manager.queue import Delivery
from manager.triton import BatchError, Generated, ModelConfig

log = logging.getLogger(__name__)

FLUSH_S = 0.005  # deltas of the same few ms go to Redis as one entry
# No response for this long while a sequence runs: its worker hangs. The engine answers every step,
# and one step takes milliseconds to a few hundred; a long prompt's prefill is one step too.
TOKEN_GAP_S = 15.0
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "seed", "stop")
CLIENT_GONE = "the client stopped reading the stream"


def sampling_of(job: Job) -> dict[str, Any]:
    """The job's sampling options as the engine's `sampling_parameters` take them (the front door
    stored them so: `frontdoor.schemas.Sampling.engine_options`)."""
    options = {k: job.parameters[k] for k in SAMPLING_KEYS if job.parameters.get(k) is not None}
    options["max_tokens"] = job.max_tokens
    return options


class TokenRelay:
    """Appends one job's deltas to its token stream, a group every FLUSH_S; records TTFT and ITL."""

    def __init__(self, redis: AsyncRedis, job: Job, model: str, ttl_s: int) -> None:
        self._redis = redis
        self._job = job
        self._model = model
        self._ttl_s = ttl_s
        self._key = tokens_key(job.id)
        self._texts: list[str] = []
        self._tokens = 0
        self._unsent: list[dict[str, str]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._last_at: float | None = None

    def add(self, text: str, count: int) -> None:
        now = time.time()
        last = self._last_at
        first = last is None
        if last is None:
            waited = max(0.0, now - self._job.created_ms / 1000)
            metrics.TIME_TO_FIRST_TOKEN.labels(self._model).observe(waited)
        elif count:
            gap = (now - last) / count
            for _ in range(min(count, 16)):
                metrics.INTER_TOKEN_LATENCY.labels(self._model).observe(gap)
        self._last_at = now
        metrics.OUTPUT_TOKENS.labels(self._model).inc(count)
        self._texts.append(text)
        self._tokens += count
        if self._flusher is None or self._flusher.done():
            # The first text goes at once (it is the time to first token); later ones in groups.
            self._flusher = asyncio.create_task(self._flush_soon(0.0 if first else FLUSH_S))

    async def _flush_soon(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        entries = self._take()
        try:
            await self._append(entries)
        except STORE_ERRORS as exc:  # kept for the next flush; the outcome is written anyway
            log.warning("job %s: appending tokens failed: %s", self._job.id, exc)
            self._unsent[:0] = entries

    def _take(self) -> list[dict[str, str]]:
        entries, self._unsent = self._unsent, []
        if self._texts:
            entries.append(tokens.delta_fields("".join(self._texts), self._tokens))
            self._texts, self._tokens = [], 0
        return entries

    async def _append(self, entries: Sequence[dict[str, str]]) -> None:
        if not entries:
            return
        # All or nothing: a retried append never doubles text. `async with`: see WorkerRegistry.publish.
        async with self._redis.pipeline(transaction=True) as pipe:
            for fields in entries:
                pipe.xadd(self._key, fields, maxlen=tokens.MAX_ENTRIES, approximate=True)  # type: ignore[arg-type]
            pipe.expire(self._key, self._ttl_s)
            await pipe.execute()

    async def reset(self, reason: str) -> None:
        """A retry: readers learn that what was streamed before is void."""
        await self._append([tokens.reset_fields(reason)])

    async def flush(self) -> None:
        """The last deltas, before the outcome is written: a reader that finds the job final and no end
        entry (`frontdoor/token_stream.py`) then finds every delta. What cannot be written is kept."""
        if self._flusher is not None:
            await self._flusher  # never cancelled midway: its entries would be lost
        entries = self._take()
        try:
            await self._append(entries)
        except STORE_ERRORS as exc:
            log.warning("job %s: appending its last tokens failed: %s", self._job.id, exc)
            self._unsent = entries

    async def end(self, outcome: Outcome) -> None:
        """The end entry, after the outcome is written: a reader that sees it finds the job final. If
        some deltas never reached the stream, the whole text replaces them first, so that what was
        streamed still adds up to the result."""
        end = tokens.end_of(outcome)
        entries = [tokens.end_fields(end)]
        if self._unsent and outcome.status is JobStatus.COMPLETED:
            repair = tokens.delta_fields(outcome.text, outcome.completion_tokens)
            entries[:0] = [
                tokens.reset_fields("some of the text was lost on its way; here it is whole"),
                repair,
            ]
        try:
            await self._append(entries)
        except STORE_ERRORS as exc:  # readers fall back to the job's status
            log.warning("job %s: writing its token stream's end failed: %s", self._job.id, exc)


class Host(Protocol):
    """What the model's dispatcher lends this runner: its queue of jobs, failure rule and writer."""

    def after_failure(
        self, slot: WorkerSlot, jobs: list[Delivery], exc: Exception, done: list[Outcome], *,
        counted: bool = False,
    ) -> bool: ...  # fmt: skip

    async def mark_running(self, jobs: Sequence[Job], started: int, worker_id: str) -> set[str]: ...

    async def write(
        self, deliveries: Sequence[Delivery], done: Sequence[Outcome], dead: bool = False
    ) -> None: ...

    def track(self, task: asyncio.Task[None]) -> None: ...


@dataclass(frozen=True, slots=True)
class Retry:
    """The job goes back to the queue: why, and whether its failure was counted already."""

    error: Exception
    counted: bool = False


def completed(delivery: Delivery, generated: Generated, started_ms: int, size: int) -> Outcome:
    return Outcome(
        job_id=delivery.job.id,
        status=JobStatus.COMPLETED,
        started_ms=started_ms,
        completed_ms=now_ms(),
        batch_size=size,
        text=generated.text,
        prompt_tokens=generated.prompt_tokens,
        completion_tokens=generated.completion_tokens,
        finish_reason=generated.finish_reason,
    )


def cancelled(delivery: Delivery, reason: str, started_ms: int) -> Outcome:
    return Outcome(
        job_id=delivery.job.id,
        status=JobStatus.CANCELLED,
        started_ms=started_ms,
        completed_ms=now_ms(),
        batch_size=0,
        error_code=CANCELLED_CODE,
        error_message=reason,
    )


class Generations:
    """One generative model's sequences on the fleet, for its dispatcher."""

    def __init__(
        self, model: str, config: ModelConfig, fleet: Fleet, *, redis: AsyncRedis, job_ttl_s: int,
        host: Host,
    ) -> None:  # fmt: skip
        self.model = model
        self.config = config
        self._fleet = fleet
        self._redis = redis
        self._ttl_s = job_ttl_s
        self._host = host
        self._calls: dict[str, asyncio.Task[Generated]] = {}
        self._active: set[str] = set()  # job ids from dispatch to their end
        self._cancel_reasons: dict[str, str] = {}

    @property
    def running(self) -> int:
        return self._fleet.sequences.total(self.model)

    async def publish_limits(self) -> None:
        """The front door refuses a max_tokens the model cannot produce; it reads the limit from here."""
        limits = {"max_num_seqs": str(self.config.max_num_seqs)}
        if self.config.max_model_len:
            limits["max_model_len"] = str(self.config.max_model_len)
        try:
            await self._redis.hset(limits_key(self.model), mapping=limits)  # type: ignore[misc]
        except STORE_ERRORS as exc:
            log.warning("%s: could not publish its limits: %s", self.model, exc)

    def dispatch(self, pending: deque[Delivery], running: dict[str, Delivery]) -> None:
        """Starts every waiting job that a worker has room for, least-loaded worker first."""
        while pending:
            slot = self._fleet.pick_for_sequence(self.model, self.config.max_num_seqs)
            if slot is None:
                return
            delivery = pending.popleft()
            running[delivery.job.id] = delivery
            self._fleet.begin_sequence(slot, self.model)
            self._host.track(asyncio.create_task(self._run(slot, delivery, running)))

    def cancel(self, job_id: str, reason: str) -> bool:
        """Stops a generation this runner started (before or after its call began); returns whether it
        had the job."""
        if job_id not in self._active:
            return False
        self._cancel_reasons[job_id] = reason
        call = self._calls.get(job_id)
        if call is not None:
            call.cancel()
        return True

    async def _run(self, slot: WorkerSlot, delivery: Delivery, running: dict[str, Delivery]) -> None:
        """One job on one worker, until it ends or goes back to the queue.

        Order matters: the attempt's last deltas reach Redis before a retry can start (its reset must
        follow them), and the outcome is written before the end entry (a reader that sees it finds the
        job final)."""
        job = delivery.job
        started = now_ms()
        relay = TokenRelay(self._redis, job, self.model, self._ttl_s)
        self._active.add(job.id)
        ended: Outcome | Retry
        try:
            if delivery.attempt > 1:
                await relay.reset("the job restarted after its worker failed")
            ended = await self._generate(slot, delivery, relay, started)
        except Exception as exc:  # Redis away, or a bug: the job goes back, the worker is not blamed
            ended = Retry(BatchError(f"{type(exc).__name__}: {exc}", worker_fault=False))
        finally:
            self._fleet.end_sequence(slot, self.model)
            self._active.discard(job.id)
            self._calls.pop(job.id, None)
            self._cancel_reasons.pop(job.id, None)
        await relay.flush()
        done: list[Outcome] = []
        dead = False
        if isinstance(ended, Retry):
            dead = self._host.after_failure(slot, [delivery], ended.error, done, counted=ended.counted)
        else:
            done.append(ended)
        await self._host.write([delivery], done, dead)
        if running.get(delivery.job.id) is delivery:  # a retry may hold the job by now
            del running[delivery.job.id]
        if done:
            await relay.end(done[0])

    async def _generate(
        self, slot: WorkerSlot, delivery: Delivery, relay: TokenRelay, started: int
    ) -> Outcome | Retry:
        """How the job ended, or why it goes back to the queue."""
        job = delivery.job
        if job.deadline_ms <= started:
            return outcomes.overdue(delivery, started)
        asked = await self._host.mark_running([job], started, slot.info.id)
        if job.id in asked or job.id in self._cancel_reasons:
            return cancelled(delivery, self._cancel_reasons.get(job.id, CLIENT_GONE), started)
        until_deadline = (job.deadline_ms - now_ms()) / 1000
        call = asyncio.create_task(
            asyncio.wait_for(
                slot.client.generate(self.model, job.prompt, sampling_of(job), relay.add, TOKEN_GAP_S),
                until_deadline,
            )
        )
        self._calls[job.id] = call
        try:
            generated = await call
        except asyncio.CancelledError:
            if cancelling():
                call.cancel()
                raise  # shutdown: the dispatcher's drain hands the job back
            reason = self._cancel_reasons.get(job.id)
            if reason is not None:
                return cancelled(delivery, reason, started)
            return self._failed(
                delivery,
                BatchError("the worker's connection closed mid-generation", worker_fault=True),
                started,
            )
        except Exception as exc:  # the sequence must never end holding its job: it would never be retried
            return self._failed(delivery, exc, started)
        size = self._fleet.sequences.running(slot.info.id, self.model)
        return completed(delivery, generated, started, size)

    def _failed(self, delivery: Delivery, exc: Exception, started: int) -> Outcome | Retry:
        """Past its deadline it fails; a worker fault or a hang goes back to the queue (RetryRule); a
        refusal by the engine (its parameters) fails it at once: trying again gives the same answer."""
        now = now_ms()
        if delivery.job.deadline_ms <= now:
            return outcomes.overdue(delivery, now, running=True)
        if isinstance(exc, TimeoutError):
            metrics.BATCH_FAILURES.labels(self.model, "timeout").inc()
            stalled = BatchError(f"no token from the worker for {TOKEN_GAP_S:.0f} s", worker_fault=True)
            return Retry(stalled, counted=True)
        if isinstance(exc, BatchError) and not exc.worker_fault:
            metrics.BATCH_FAILURES.labels(self.model, "model_error").inc()
            return outcomes.failed(
                delivery, outcomes.MODEL_ERROR, str(exc), started_ms=started, completed_ms=now, size=1
            )
        return Retry(exc)


def cancelling() -> bool:
    """Whether the running task itself is being cancelled (not merely a call inside it)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
