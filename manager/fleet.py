"""The manager's view of the worker pool: who is READY with which model, and how busy each one is."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from manager.metrics import BusyClient
from manager.triton import InferenceClient, TritonClient
from manager.workers import WorkerInfo, WorkerRegistry, WorkerState

log = logging.getLogger(__name__)

ClientFactory = Callable[[str], InferenceClient]


@dataclass(slots=True)
class WorkerSlot:
    """A worker and the batches this manager has in flight on it."""

    info: WorkerInfo
    client: InferenceClient
    inflight: int = 0

    def serves(self, model: str) -> bool:
        return self.info.state is WorkerState.READY and model in self.info.models


class Fleet:
    def __init__(
        self, registry: WorkerRegistry, client_factory: ClientFactory, max_inflight_batches: int
    ) -> None:
        self._registry = registry
        self._client_factory = client_factory
        self.max_inflight = max_inflight_batches
        self.workers: dict[str, WorkerSlot] = {}

    @classmethod
    def for_triton(cls, registry: WorkerRegistry, timeout_s: float, max_inflight_batches: int) -> Fleet:
        return cls(registry, lambda url: TritonClient(url, timeout_s), max_inflight_batches)

    async def refresh(self) -> bool:
        """Reads the registry; returns True when the set of usable workers changed."""
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
                client = BusyClient(worker_id, self._client_factory(info.grpc_url))  # busy-time metrics
                self.workers[worker_id] = WorkerSlot(info, client)
                changed = True
                continue
            changed |= existing.info.state != info.state or existing.info.models != info.models
            existing.info = info
        return changed

    def serving(self, model: str) -> list[WorkerSlot]:
        return [slot for slot in self.workers.values() if slot.serves(model)]

    def pick(self, model: str) -> WorkerSlot | None:
        """The READY worker holding the model with the fewest batches in flight, if any has room."""
        ready = [slot for slot in self.serving(model) if slot.inflight < self.max_inflight]
        return min(ready, key=lambda slot: slot.inflight, default=None)

    def has_idle(self, model: str) -> bool:
        return any(slot.inflight == 0 for slot in self.serving(model))

    async def aclose(self) -> None:
        for slot in self.workers.values():
            await slot.client.close()
        self.workers.clear()
