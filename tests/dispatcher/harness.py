"""In-process managers against a real Redis: the real ModelDispatcher, JobQueue and Fleet, fake workers.

One `Site` per test, for one model of its own (so one stream of its own): it registers fake workers
in the real worker registry, starts managers (a queue, a fleet and a dispatcher each, wired as
`manager/service.py` wires them), submits jobs through the front door's own submit script, and
reads back what a client or an operator would see in Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from contract.catalog import ServedModel
from contract.job_record import is_final
from contract.job_store import JobStore
from contract.jobs import EmbeddingOptions, Job, now_ms
from contract.keys import CONSUMER_GROUP, dead_letter_key, done_key, job_key, stream_key, tokens_key
from contract.redis_client import AsyncRedis
from contract.workers import WorkerInfo, WorkerRegistry, WorkerState
from manager.busy import BusyClock
from manager.cost import CostLedger
from manager.dispatcher import ModelDispatcher
from manager.fleet import Fleet
from manager.pool import WorkerPool
from manager.queue import Delivery, JobQueue
from manager.triton import InferenceClient
from tests.dispatcher.workers import FakeWorker

JOB_TTL_S = 600
HEARTBEAT_S = 10.0  # registrations outlive any test; `Site.heartbeats` renews them when a test needs it
WAIT_S = 10.0  # the most any wait in these tests may take; a healthy run takes a fraction of it


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], what: str, timeout_s: float = WAIT_S
) -> None:
    """Polls `check` (plain or async) until it holds; fails the test with `what` if not within timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not await _result(check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.02)


async def _result(value: bool | Awaitable[bool]) -> bool:
    return await value if inspect.isawaitable(value) else bool(value)


@dataclass
class InProcessManager:
    """What one manager process holds for one model."""

    queue: JobQueue
    fleet: Fleet
    dispatcher: ModelDispatcher
    stopped: bool = False

    async def stop(self, drain_s: float = 0.0) -> None:
        """Shuts down as the manager does: stop reading, drain, hand back the rest, close the clients."""
        if self.stopped:
            return
        self.stopped = True
        await self.dispatcher.stop_intake()
        await self.dispatcher.drain(drain_s)
        await self.fleet.aclose()


class Site:
    def __init__(self, redis: AsyncRedis, store: JobStore, model: str) -> None:
        self.redis = redis
        self.store = store
        self.model = model
        self.registry = WorkerRegistry(redis, HEARTBEAT_S)
        self.workers: dict[str, FakeWorker] = {}  # by gRPC URL, as the fleet's client factory looks them up
        # The model's catalog entry: its first worker's kind and limits (one-shot until one is added).
        self.served: ServedModel | None = None
        self.managers: list[InProcessManager] = []
        self._heartbeats: asyncio.Task[None] | None = None

    # -- workers ---------------------------------------------------------------------------------

    async def add_worker(
        self, name: str = "w", *, max_batch: int = 8, poison: str | None = None, generative: bool = False,
        max_num_seqs: int = 4, embedding: bool = False,
    ) -> FakeWorker:  # fmt: skip
        """A READY worker serving this site's model, registered in Redis and seen by every manager."""
        worker = FakeWorker(
            f"{self.model}-{name}", max_batch=max_batch, poison=poison, generative=generative,
            max_num_seqs=max_num_seqs, embedding=embedding,
        )  # fmt: skip
        self.workers[worker.url] = worker
        self.served = self.served or worker.served(self.model)
        await self._publish(worker)
        for manager in self.managers:
            await manager.fleet.refresh()
        return worker

    async def _publish(self, worker: FakeWorker) -> None:
        info = WorkerInfo(
            id=worker.id, grpc_url=worker.url, http_url="", metrics_url="", models=frozenset({self.model}),
            state=WorkerState.READY, started_ms=now_ms(),
        )  # fmt: skip
        await self.registry.publish(info)

    def _client(self, url: str) -> InferenceClient:
        # Another test's worker (still registered while it tears down) gets a stand-in nobody uses.
        return self.workers.get(url) or FakeWorker("stranger")

    def heartbeats(self, every_s: float = 0.02) -> None:
        """Renews every worker's registration and refreshes every manager's fleet, as the worker agents
        and the managers' fleet loops do: a worker suspected after a failed batch comes back."""

        async def beat() -> None:
            while True:
                for worker in list(self.workers.values()):
                    await self._publish(worker)
                for manager in self.managers:
                    if not manager.stopped:
                        await manager.fleet.refresh()
                await asyncio.sleep(every_s)

        self._heartbeats = asyncio.create_task(beat(), name=f"heartbeats:{self.model}")

    # -- managers --------------------------------------------------------------------------------

    async def start_manager(
        self, consumer: str = "manager-a", *, max_attempts: int = 3, reclaim_idle_s: float = 5.0,
        max_wait_s: float = 0.005, max_inflight: int = 2,
    ) -> InProcessManager:  # fmt: skip
        queue = JobQueue(self.redis, consumer, JOB_TTL_S)
        fleet = Fleet(self.registry, self._client, WorkerPool(max_inflight, BusyClock()))
        served = self.served or FakeWorker("first").served(self.model)
        dispatcher = ModelDispatcher(
            served, queue, fleet, CostLedger(price_per_hour=1.0), max_wait_s=max_wait_s,
            max_attempts=max_attempts, reclaim_idle_s=reclaim_idle_s,
        )  # fmt: skip
        fleet.subscribe(dispatcher.poke)
        await fleet.refresh()
        await dispatcher.start()
        manager = InProcessManager(queue, fleet, dispatcher)
        self.managers.append(manager)
        return manager

    async def aclose(self) -> None:
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeats
        for worker in self.workers.values():
            worker.release()
        for manager in self.managers:
            await manager.stop()
        for worker in self.workers.values():
            await self.registry.remove(worker.id)

    # -- jobs, as the front door writes them and as clients and operators read them --------------

    async def token_entries(self, job: Job) -> list[dict[str, str]]:
        """The job's token stream, oldest first (contract/tokens.py)."""
        return [fields for _entry_id, fields in await self.redis.xrange(tokens_key(job.id))]

    def submit(self, prompt: str, *, timeout_ms: int = 30_000, max_tokens: int = 4) -> Job:
        job = Job.new(model=self.model, prompt=prompt, max_tokens=max_tokens, timeout_ms=timeout_ms)
        assert self.store.submit(job), "the front door refused the job"
        return job

    def submit_texts(self, texts: Sequence[str], *, truncate: bool = True) -> Job:
        """An embedding job, as `/v1/embeddings` and `/async-infer` with an input list write it."""
        job = Job.new(
            model=self.model, prompt="", max_tokens=0, parameters=EmbeddingOptions(truncate=truncate),
            timeout_ms=30_000, inputs=tuple(texts),
        )  # fmt: skip
        assert self.store.submit(job), "the front door refused the job"
        return job

    async def job(self, job: Job) -> dict[str, str]:
        fields: dict[str, str] = await self.redis.hgetall(job_key(job.id))  # type: ignore[misc]
        return fields

    async def wait_final(self, jobs: Sequence[Job], timeout_s: float = WAIT_S) -> list[dict[str, str]]:
        """Every job's hash once each is COMPLETED or FAILED."""

        async def all_final() -> bool:
            return all(is_final(h) for h in [await self.job(j) for j in jobs])

        await eventually(all_final, f"{len(jobs)} jobs final", timeout_s)
        return [await self.job(j) for j in jobs]

    async def done_signals(self, job: Job) -> int:
        """How many times the job's done-list was pushed: once per final outcome written."""
        return int(await self.redis.llen(done_key(job.id)))  # type: ignore[misc]

    async def pending(self) -> list[dict[str, Any]]:
        """The consumer group's pending list: entries read by a manager and not yet acknowledged."""
        rows: list[dict[str, Any]] = await self.redis.xpending_range(
            stream_key(self.model), CONSUMER_GROUP, min="-", max="+", count=1000
        )
        return rows

    async def stream_length(self) -> int:
        return int(await self.redis.xlen(stream_key(self.model)))

    async def dead_letters(self) -> list[dict[str, str]]:
        entries = await self.redis.xrange(dead_letter_key(self.model))
        return [fields for _entry_id, fields in entries]


def entries(*deliveries: Delivery) -> dict[str, tuple[str, Job]]:
    """What `JobQueue.complete` takes of the deliveries: each job's stream entry and job."""
    return {d.job.id: (d.entry_id, d.job) for d in deliveries}
