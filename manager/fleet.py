"""The manager's view of the worker pool: who is READY with which model, and a client to each.

The rules for choosing among them (fewest batches in flight, when a busy one frees up, busy time,
throughput) are pure code in `manager/pool.py`, which the capacity simulator drives too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from contract.jobs import now_ms
from contract.workers import WorkerInfo, WorkerRegistry, WorkerState
from manager.busy import BusyClock
from manager.pool import SequenceSlots, WorkerPool
from manager.triton import InferenceClient, TritonClient

log = logging.getLogger(__name__)

ClientFactory = Callable[[str], InferenceClient]

LOAD_RETRY_S = 60.0


@dataclass(slots=True)
class WorkerSlot:
    """A worker as the registry shows it, and this manager's client to it."""

    info: WorkerInfo
    client: InferenceClient
    suspect_since_ms: int = 0  # a batch failed at the transport: wait for a newer heartbeat

    def serves(self, model: str) -> bool:
        return (
            self.info.state is WorkerState.READY and model in self.info.models and not self.suspect_since_ms
        )


class Fleet:
    def __init__(self, registry: WorkerRegistry, client_factory: ClientFactory, pool: WorkerPool) -> None:
        self._registry = registry
        self._client_factory = client_factory
        self.pool = pool
        self.sequences = SequenceSlots()
        self.workers: dict[str, WorkerSlot] = {}
        self._listeners: list[Callable[[], None]] = []
        self._load_asked: dict[str, float] = {}

    @classmethod
    def for_triton(
        cls, registry: WorkerRegistry, timeout_s: float, max_inflight_batches: int, busy: BusyClock
    ) -> Fleet:
        return cls(registry, lambda url: TritonClient(url, timeout_s), WorkerPool(max_inflight_batches, busy))

    @property
    def max_inflight(self) -> int:
        return self.pool.max_inflight

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Called whenever capacity may have freed up: a batch ended or the pool changed.

        Workers are shared by every model, so a slot one model's batch frees may be what another
        model's dispatcher is waiting for.
        """
        self._listeners.append(listener)

    def _notify(self) -> None:
        for listener in self._listeners:
            listener()

    def acquire(self, slot: WorkerSlot, expected_s: float | None = None) -> float:
        """One more batch on the worker, expected to take expected_s once it starts (None: unknown);
        returns when it was sent, for `release`."""
        sent_at = time.monotonic()
        self.pool.acquire(slot.info.id, sent_at, expected_s)
        return sent_at

    def release(self, slot: WorkerSlot, sent_at: float, jobs_done: int = 0) -> float:
        """The batch sent at sent_at is back; returns its own time on the worker (WorkerPool.release)."""
        own = self.pool.release(slot.info.id, time.monotonic(), sent_at, jobs_done)
        self._notify()
        return own

    def inflight(self, slot: WorkerSlot) -> int:
        return self.pool.inflight(slot.info.id)

    def busy_until(self, model: str) -> float | None:
        """When the first busy worker with room for another batch should finish (monotonic seconds)."""
        return self.pool.busy_until(self._serving_ids(model))

    async def refresh(self) -> bool:
        """Reads the registry and wakes every dispatcher when the set of usable workers changed."""
        seen = {info.id: info for info in await self._registry.list()}
        changed = False
        for worker_id in list(self.workers):
            if worker_id not in seen:
                log.info("worker %s left the pool", worker_id)
                slot = self.workers.pop(worker_id)
                await slot.client.close()
                changed = True
        for worker_id, info in seen.items():
            existing = self.workers.get(worker_id)
            if existing is None:
                log.info("worker %s joined the pool (%s, %s)", worker_id, info.state, info.grpc_url)
                self.workers[worker_id] = WorkerSlot(info, self._client_factory(info.grpc_url))
                changed = True
                continue
            changed |= existing.info.state != info.state or existing.info.models != info.models
            if existing.suspect_since_ms and info.heartbeat_ms > existing.suspect_since_ms:
                log.info("worker %s heartbeats again after a failed batch; back in the pool", worker_id)
                existing.suspect_since_ms = 0
                changed = True
            existing.info = info
        if changed:
            self._notify()
        return changed

    def serving(self, model: str) -> list[WorkerSlot]:
        return [slot for slot in self.workers.values() if slot.serves(model)]

    def _serving_ids(self, model: str) -> list[str]:
        return [slot.info.id for slot in self.serving(model)]

    def pick(self, model: str) -> WorkerSlot | None:
        """The READY worker holding the model with the fewest batches in flight, if any has room."""
        worker = self.pool.pick(self._serving_ids(model))
        return None if worker is None else self.workers[worker]

    def pick_for_sequence(
        self, model: str, budget: int, key: bytes | None = None, *, need: int = 0,
        kv_tokens: int | None = None,
    ) -> WorkerSlot | None:  # fmt: skip
        """The READY worker holding the model, under budget and with `need` KV tokens free, for a prompt
        with this prefix key (none: the one with the fewest of the model's sequences running)."""
        worker = self.sequences.pick(
            self._serving_ids(model), model, budget, key, need=need, kv_tokens=kv_tokens
        )
        return None if worker is None else self.workers[worker]

    def begin_sequence(self, slot: WorkerSlot, model: str, tokens: int = 0) -> None:
        """A generation started on the worker: it counts as busy while any runs (the busy clock)."""
        self.sequences.acquire(slot.info.id, model, tokens)
        self.pool.busy.begin(slot.info.id, time.monotonic())

    def end_sequence(self, slot: WorkerSlot, model: str, tokens: int = 0) -> None:
        self.sequences.release(slot.info.id, model, tokens)
        self.pool.busy.end(slot.info.id, time.monotonic())
        self._notify()

    def has_idle(self, model: str) -> bool:
        return self.pool.has_idle(self._serving_ids(model))

    def throughput(self) -> float:
        """Jobs per busy second of one worker (see WorkerPool.throughput)."""
        return self.pool.throughput(time.monotonic())

    def busy_seconds(self) -> float:
        """Seconds the current workers spent with a batch of this manager's in flight."""
        return self.pool.busy_seconds(time.monotonic())

    async def ensure_loaded(self, model: str) -> None:
        """Asks the least busy READY worker to load a model that no worker holds.

        Asks again after LOAD_RETRY_S if the model has not appeared: a load can fail (the agent only
        logs it), and the next worker asked may succeed.
        """
        if (
            self.serving(model)
            or time.monotonic() < self._load_asked.get(model, -LOAD_RETRY_S) + LOAD_RETRY_S
        ):
            return
        ready = [
            s for s in self.workers.values() if s.info.state is WorkerState.READY and not s.suspect_since_ms
        ]
        target = min(ready, key=lambda s: (len(s.info.models), self.inflight(s)), default=None)
        if target is None:
            return  # no worker at all: the autoscaler brings one, with its startup models
        self._load_asked[model] = time.monotonic()
        log.info("no worker holds %s: asking %s to load it", model, target.info.id)
        await self._registry.request_load(target.info.id, model)

    def suspect(self, slot: WorkerSlot) -> None:
        """Takes a worker out of rotation until it heartbeats after this moment; a dead one never does,
        and drops out of the registry within three heartbeats."""
        slot.suspect_since_ms = now_ms()

    async def aclose(self) -> None:
        for slot in self.workers.values():
            await slot.client.close()
        self.workers.clear()
