"""Runs a generative model's jobs: each one sent on arrival to a worker's continuous-batching engine.

There is no batch window: the engine batches at every decoding step, so a job goes at once to the READY
worker with the fewest of the model's sequences running, as long as one is under the model's budget
(`max_num_seqs` in its catalog entry, from its Triton config); the rest wait in the queue, where the
autoscaler sees them. The worker streams the text back over gRPC; `TokenRelay` appends it to the job's
token stream in Redis in small groups, and the outcome is written as for any job when the engine says it
ended.

A client that goes away cancels its job (`cancel`): the gRPC stream is cancelled, Triton cancels the
request, and the engine drops the sequence at its next step.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from contract.catalog import ServedModel
from contract.jobs import CLIENT_GONE, Job, Outcome, Sampling, now_ms
from contract.redis_client import AsyncRedis
from contract.settings import GenerationRouting
from contract.time_limit import within
from manager import aio, metrics, outcomes
from manager.fleet import Fleet, WorkerSlot
from manager.prefix_routing import prefix_key
from manager.queue import Delivery, Waiting
from manager.runner import Runner
from manager.settler import Settler
from manager.token_relay import TokenRelay
from manager.triton import BatchError, Gaps, Generated

log = logging.getLogger(__name__)

# No response for this long while a sequence runs: its worker hangs. The engine answers every step, and
# one step takes milliseconds to a few hundred. Before the first response, a prompt can wait in the
# engine behind others' prefills: 16 uncached 1,500-token prompts on one CPU worker waited over 15 s
# there and were taken for a hang, retried and failed (bench/prefix_cache.py, least-loaded routing).
GAPS = Gaps(first=90.0, between=15.0)


# Bytes of prompt per token, leaning low so that a prompt's KV need is rather over- than under-counted:
# English takes about 4 bytes a token in a BPE vocabulary, digits and code fewer (the prefix benchmark's
# system prompts: 2.8). The manager holds no tokenizer.
BYTES_PER_TOKEN = 3


def kv_need(job: Job) -> int:
    """The KV-cache tokens a generation may take on its worker: its prompt's, and every choice's answer."""
    choices = job.parameters.n or 1 if isinstance(job.parameters, Sampling) else 1
    return len(job.prompt.encode()) // BYTES_PER_TOKEN + job.max_tokens * choices


def sampling_of(job: Job) -> dict[str, Any]:
    """The job's sampling options as the engine's `sampling_parameters` take them."""
    sampling = job.parameters if isinstance(job.parameters, Sampling) else Sampling()
    return sampling.engine_options(job.max_tokens)


@dataclass(frozen=True, slots=True)
class Retry:
    """The job goes back to the queue: why, and whether its failure was counted already."""

    error: Exception
    counted: bool = False


class GenerationRunner(Runner):
    """One generative model's sequences on the fleet."""

    drains_waiting = False  # a generation cut off at the drain's timeout would cost its job an attempt

    def __init__(
        self, model: str, config: ServedModel, fleet: Fleet, settler: Settler, *, redis: AsyncRedis,
        job_ttl_s: int, routing: GenerationRouting,
    ) -> None:  # fmt: skip
        super().__init__()
        self.model = model
        self._routing = routing
        self.config = config
        self._fleet = fleet
        self._redis = redis
        self._ttl_s = job_ttl_s
        self._settler = settler
        self._calls: dict[str, asyncio.Task[Generated]] = {}
        self._active: set[str] = set()  # job ids from dispatch to their end
        self._cancel_reasons: dict[str, str] = {}

    def sequences(self) -> tuple[int, int]:
        return self._fleet.sequences.total(self.model), self.config.max_num_seqs

    def send(self, waiting: Waiting) -> None:
        """Starts every waiting job that a worker has room for, each on the worker likeliest to hold its
        prompt's prefix within a bound of the least loaded (manager/prefix_routing.py), or on the least
        loaded; batch jobs take the sequence slots interactive ones leave."""
        for pending in (waiting.interactive, waiting.batch):
            while pending:
                job = pending[0].job
                key = prefix_key(job.prompt) if self._routing == "prefix" else None
                need = kv_need(job)
                slot = self._fleet.pick_for_sequence(
                    self.model, self.config.max_num_seqs, key, need=need, kv_tokens=self.config.kv_tokens
                )
                if slot is None:
                    return
                delivery = pending.popleft()
                self.running[delivery.job.id] = delivery
                self._fleet.begin_sequence(slot, self.model, need)
                self.track(asyncio.create_task(self._run(slot, delivery)))

    async def cancel(self, job_id: str, reason: str) -> bool:
        """Stops a generation this runner started (before or after its call began); returns whether it
        had the job."""
        if job_id not in self._active:
            return False
        self._cancel_reasons[job_id] = reason
        call = self._calls.get(job_id)
        if call is not None:
            call.cancel()
        return True

    async def _run(self, slot: WorkerSlot, delivery: Delivery) -> None:
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
            self._fleet.end_sequence(slot, self.model, kv_need(job))
            self._active.discard(job.id)
            self._calls.pop(job.id, None)
            self._cancel_reasons.pop(job.id, None)
        await relay.flush()
        done: list[Outcome] = []
        dead = False
        if isinstance(ended, Retry):
            dead = self._settler.after_failure(slot, [delivery], ended.error, done, counted=ended.counted)
        else:
            done.append(ended)
        await self._settler.write([delivery], done, dead)
        self.done_with([delivery])
        if done:
            await relay.end(done[0])

    async def _generate(
        self, slot: WorkerSlot, delivery: Delivery, relay: TokenRelay, started: int
    ) -> Outcome | Retry:
        """How the job ended, or why it goes back to the queue."""
        job = delivery.job
        if job.deadline_ms <= started:
            return outcomes.overdue(delivery, started)
        asked = await self._settler.mark_running([job], started, slot.info.id)
        if job.id in asked or job.id in self._cancel_reasons:
            return outcomes.cancelled(delivery, self._cancel_reasons.get(job.id, CLIENT_GONE), started)
        until_deadline = (job.deadline_ms - now_ms()) / 1000
        call = asyncio.create_task(
            within(
                until_deadline,
                slot.client.generate(self.model, job.prompt, sampling_of(job), relay.add, GAPS),
            )
        )
        self._calls[job.id] = call
        try:
            generated = await call
        except asyncio.CancelledError:
            if aio.cancelling():
                call.cancel()
                raise  # shutdown: the dispatcher's drain hands the job back
            reason = self._cancel_reasons.get(job.id)
            if reason is not None:
                return outcomes.cancelled(delivery, reason, started)
            return self._failed(
                delivery,
                BatchError("the worker's connection closed mid-generation", worker_fault=True),
                started,
            )
        except Exception as exc:  # the sequence must never end holding its job: it would never be retried
            return self._failed(delivery, exc, started)
        size = self._fleet.sequences.running(slot.info.id, self.model)
        return outcomes.from_generated(delivery, generated, started_ms=started, size=size)

    def _failed(self, delivery: Delivery, exc: Exception, started: int) -> Outcome | Retry:
        """Past its deadline it fails; a worker fault or a hang goes back to the queue (RetryRule); a
        refusal by the engine (its parameters) fails it at once: trying again gives the same answer."""
        now = now_ms()
        if delivery.job.deadline_ms <= now:
            return outcomes.overdue(delivery, now, running=True)
        if isinstance(exc, TimeoutError):
            metrics.BATCH_FAILURES.labels(self.model, "timeout").inc()
            stalled = BatchError("the worker sent nothing for longer than a hang's gap", worker_fault=True)
            return Retry(stalled, counted=True)
        if isinstance(exc, BatchError) and not exc.worker_fault:
            metrics.BATCH_FAILURES.labels(self.model, "model_error").inc()
            return outcomes.failed(
                delivery, outcomes.MODEL_ERROR, str(exc), started_ms=started, completed_ms=now, size=1
            )
        return Retry(exc)
