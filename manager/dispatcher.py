"""Moves one model's jobs from its stream to the runner of its kind, losing none.

Loops share two in-memory buffers, one per priority: the reader fills both from the model's two
streams in one read; the dispatch loop hands them to the model's runner (`runner.py`: one-shot
batches, embedding batches, or generations), which starts what it can; the upkeep loop renews this
manager's claim on what it holds, takes over jobs of managers that died, moves batch jobs past half
their time to the front of the interactive buffer, and fails jobs whose deadline passed while they
waited. The batch buffer holds a batch per worker, no more: what it leaves in the stream any
manager can take. Every job write goes through the model's `Settler`.

The batching window runs on this manager's own clock, from when it read each job, so clock skew
between the front door and the manager cannot move it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from redis.exceptions import ResponseError

from contract.catalog import ModelKind, ServedModel
from contract.jobs import CLIENT_GONE, Priority, now_ms
from contract.redis_client import STORE_ERRORS
from contract.settings import GenerationRouting
from contract.time_limit import stop
from manager import aio, outcomes
from manager.cost import CostLedger
from manager.embedding import EmbeddingRunner
from manager.fleet import Fleet
from manager.generation import GenerationRunner
from manager.one_shot import OneShotRunner
from manager.queue import JobQueue, Waiting
from manager.runner import Runner
from manager.settler import Settler

log = logging.getLogger(__name__)

READ_BLOCK_MS = 1000
# A read that leaves out a full buffer's stream blocks only this long, so that the stream is read again
# soon after its buffer has room (a blocked XREADGROUP cannot be widened).
PARTIAL_READ_BLOCK_MS = 20
UPKEEP_S = 0.5
MAX_IDLE_S = 1.0
RELEASE_IDLE_FACTOR = 10  # a released entry looks idle for ten reclaim periods: taken over at once


class ModelDispatcher:
    def __init__(
        self, served: ServedModel, queue: JobQueue, fleet: Fleet, ledger: CostLedger, *, max_wait_s: float,
        max_attempts: int, reclaim_idle_s: float, routing: GenerationRouting = "prefix",
    ) -> None:  # fmt: skip
        self.model = served.name
        self.served = served
        self._queue = queue
        self._fleet = fleet
        self._ledger = ledger
        self._max_wait_s = max_wait_s
        self._max_attempts = max_attempts
        self._reclaim_idle_ms = int(reclaim_idle_s * 1000)
        self._routing = routing
        self._lease_s = reclaim_idle_s / 4
        self._waiting = Waiting()
        self._changed = asyncio.Event()
        self._settler = Settler(
            self.model, queue, fleet, ledger, waiting=self._waiting, wake=self._changed,
            max_attempts=max_attempts, end_to_end=not served.generates,
        )  # fmt: skip
        self._runner = self._runner_for(served)
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

    @property
    def sequences(self) -> tuple[int, int] | None:
        """A generative model's running sequences and per-worker budget; None for any other model."""
        return self._runner.sequences()

    async def cancel(self, job_id: str, reason: str = CLIENT_GONE) -> None:
        """A client asked to stop the job: a waiting job ends CANCELLED now, a running one is stopped."""
        if await self._runner.cancel(job_id, reason):
            return
        waiting = self._waiting.take(job_id)
        if waiting is not None:
            await self._settler.write([waiting], [outcomes.cancelled(waiting, reason, now_ms())])

    async def start(self) -> None:
        await aio.with_backoff(
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
            await stop(self._loops.get(name))

    async def drain(self, timeout_s: float) -> None:
        """Runs what was read while workers allow (up to timeout_s; a generative runner starts nothing
        new: `Runner.drains_waiting`), then hands the rest back to the group."""
        deadline = time.monotonic() + timeout_s
        sends = self._runner.drains_waiting
        if not sends:
            await stop(self._loops.get("dispatch"))
        while (self._busy or (self._waiting and sends)) and time.monotonic() < deadline:
            if not self._busy and not self._fleet.serving(self.model):
                break  # no worker to run them: hand them back rather than wait
            self.poke()
            await asyncio.sleep(0.05)
        await stop(self._loops.get("dispatch"))
        await self._runner.drain()
        with contextlib.suppress(*STORE_ERRORS):
            # What Redis still lists under this manager: what it held, and what a read cut short by
            # stop_intake delivered but never handed over.
            leftover = await self._queue.held(self.model)
            if any(leftover.values()):
                count = sum(map(len, leftover.values()))
                log.info("%s: handing %d unfinished jobs back to the group", self.model, count)
                await self._queue.release(self.model, leftover, self._reclaim_idle_ms * RELEASE_IDLE_FACTOR)

    @property
    def _busy(self) -> bool:
        return self._runner.busy

    def _rooms(self) -> dict[Priority, int]:
        """What each buffer can take, in the runner's rows (texts for an embedding model), for the
        streams worth reading now.

        Interactive: two batches per batch slot. Batch: a batch per worker, read only once a whole
        batch fits (one XREADGROUP has one COUNT for its streams: a read of a few batch jobs would
        read as few interactive ones)."""
        max_batch = self.served.max_batch_size
        workers = max(1, len(self._fleet.serving(self.model)))
        held = self._runner.rows
        interactive = max_batch * self._fleet.max_inflight * workers * 2 - held(self._waiting.interactive)
        batch = max_batch * workers - held(self._waiting.batch)
        rooms: dict[Priority, int] = {}
        if interactive > 0:
            rooms[Priority.INTERACTIVE] = interactive
        if batch >= max_batch:
            rooms[Priority.BATCH] = batch
        return rooms

    async def _read_loop(self) -> None:
        failures = 0
        while True:
            rooms = self._rooms()
            if not rooms:
                await asyncio.sleep(0.005)
                continue
            block_ms = READ_BLOCK_MS if len(rooms) == len(Priority) else PARTIAL_READ_BLOCK_MS
            room = min(rooms.values())
            count = self._runner.entries_for(room)
            try:
                deliveries = await self._queue.read(
                    self.model, count=count, block_ms=block_ms, priorities=list(rooms)
                )
                failures = 0
            except STORE_ERRORS as exc:
                if isinstance(exc, ResponseError) and "NOGROUP" in str(exc):
                    await self._queue.ensure_group(self.model)  # Redis came back without our group
                failures += 1
                delay = aio.backoff_s(failures)
                log.warning("%s: reading the stream failed (%s); retrying in %.2f s", self.model, exc, delay)
                await asyncio.sleep(delay)
                continue
            if deliveries:
                self._runner.observe(deliveries)
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
            await self._settler.write(overdue, [outcomes.overdue(d, now) for d in overdue])

    async def _renew_and_reclaim(self) -> None:
        held: dict[Priority, list[str]] = {p: [] for p in Priority}
        running = self._runner.running.values()
        for d in (*self._waiting, *running):
            held[d.job.priority].append(d.entry_id)
        await self._queue.touch(self.model, held)
        reclaimed = await self._queue.reclaim(self.model, self._reclaim_idle_ms)
        if not reclaimed:
            return
        log.info("%s: took over %d jobs from a manager that stopped", self.model, len(reclaimed))
        exhausted = [d for d in reclaimed if d.attempt > self._max_attempts]
        if exhausted:
            reason = "its manager stopped while it ran"
            await self._settler.write(
                exhausted, [outcomes.exhausted(d, reason, now_ms()) for d in exhausted], dead=True
            )
        self._waiting.requeue([d for d in reclaimed if d.attempt <= self._max_attempts])
        self.poke()

    def _runner_for(self, served: ServedModel) -> Runner:
        """The one place that tells the kinds apart (the catalog names each model's kind)."""
        if served.kind is ModelKind.GENERATIVE:
            log.info("%s: generative, up to %d sequences per worker", self.model, served.max_num_seqs)
            return GenerationRunner(
                self.model, served, self._fleet, self._settler, redis=self._queue.redis,
                job_ttl_s=self._queue.job_ttl_s, routing=self._routing,
            )  # fmt: skip
        log.info("%s: %s, max_batch_size %d, window %.0f ms", self.model, served.kind,
                 served.max_batch_size, self._max_wait_s * 1e3)  # fmt: skip
        kind = EmbeddingRunner if served.kind is ModelKind.EMBEDDING else OneShotRunner
        return kind(self.model, served, self._fleet, self._settler, self._ledger, max_wait_s=self._max_wait_s)

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
        """Hands the runner what waits; returns when to look again (None: on the next event)."""
        if not self._waiting:
            return None
        if not self._fleet.serving(self.model):
            await self._fleet.ensure_loaded(self.model)  # no worker serves it (yet, or any more): ask one
        return self._runner.send(self._waiting)
