"""Worker registrations in Redis: what a worker says about itself, written by its agent, read by managers.

A registration expires unless its heartbeat renews it, so a worker that dies silently drops out after
`REGISTRATION_TTL_BEATS` missed heartbeats; a live one never does, busy or starting (`registration_ttl_s`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

from contract.jobs import now_ms
from contract.keys import WORKERS_KEY, worker_key, worker_load_key
from contract.redis_client import AsyncRedis
from contract.settings import WORKER_MODELS_NONE, Settings

log = logging.getLogger(__name__)

REGISTRATION_TTL_BEATS = 3
# What a renewal may take on top of its schedule: the Redis round trip and event-loop lag, generously.
RENEWAL_ALLOWANCE_S = 0.5
# A load request for a worker that died (or never reads it) goes away on its own.
LOAD_REQUEST_TTL_MS = 60_000
# In a worker's folder: created once it serves (READY, or a warm STANDBY) and removed as it stops. The
# local provider starts the next worker when the last one has it: starts at once share the CPU.
SERVING_MARKER = "serving"


def startup_models(settings: Settings, available: Callable[[], Sequence[str]]) -> list[str]:
    """What a worker loads as it starts: SYNAPSE_WORKER_MODELS (none at all for `none`), else every
    available model (asked only then: a store's listing is a round trip); the first
    `worker_model_budget` of them, since each load past the budget would unload one loaded before it."""
    if settings.worker_models == (WORKER_MODELS_NONE,):
        return []
    models = list(settings.worker_models or available())
    if len(models) > settings.worker_model_budget:
        log.warning("a worker starts with the first %d of its %d models (SYNAPSE_WORKER_MODEL_BUDGET)",
                    settings.worker_model_budget, len(models))  # fmt: skip
    return models[: settings.worker_model_budget]


def worker_folder(state_dir: Path, worker_id: str) -> Path:
    """A worker's files on its machine: its model repository, its liveness file and serving marker."""
    return state_dir / "workers" / worker_id


class WorkerState(StrEnum):
    STARTING = "STARTING"
    STANDBY = "STANDBY"  # warm: Triton up, models loaded, not taking work until promoted
    READY = "READY"
    DRAINING = "DRAINING"
    DEGRADED = "DEGRADED"
    FAILED = "FAILED"  # refused to serve, `reason` says why (a GPU worker without CUDA): never dispatched to


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    id: str
    grpc_url: str
    http_url: str
    metrics_url: str
    models: frozenset[str]
    state: WorkerState
    started_ms: int
    heartbeat_ms: int = 0
    busy_ratio: float = 0.0
    reason: str = ""  # why a FAILED worker refused to serve

    def hash_fields(self) -> dict[str, str]:
        return {
            "id": self.id,
            "grpc_url": self.grpc_url,
            "http_url": self.http_url,
            "metrics_url": self.metrics_url,
            "models": ",".join(sorted(self.models)),
            "state": self.state.value,
            "started_ms": str(self.started_ms),
            "heartbeat_ms": str(self.heartbeat_ms),
            "busy_ratio": f"{self.busy_ratio:.4f}",
            "reason": self.reason,
        }

    @classmethod
    def from_hash(cls, fields: Mapping[str, str]) -> WorkerInfo:
        return cls(
            id=fields["id"],
            grpc_url=fields["grpc_url"],
            http_url=fields["http_url"],
            metrics_url=fields["metrics_url"],
            models=frozenset(m for m in fields.get("models", "").split(",") if m),
            state=WorkerState(fields["state"]),
            started_ms=int(fields["started_ms"]),
            heartbeat_ms=int(fields.get("heartbeat_ms") or 0),
            busy_ratio=float(fields.get("busy_ratio") or 0.0),
            reason=fields.get("reason", ""),
        )


def readiness_timeout_s(heartbeat_s: float) -> float:
    """Half a heartbeat: a Triton that does not answer its readiness check cannot hold up the beat."""
    return heartbeat_s / 2


def worst_renewal_gap_s(heartbeat_s: float, readiness_timeout_s: float) -> float:
    """The longest time between two renewals of a live worker: the beat, its readiness check, Redis."""
    return heartbeat_s + readiness_timeout_s + RENEWAL_ALLOWANCE_S


def registration_ttl_s(heartbeat_s: float, readiness_timeout_s: float) -> float:
    """Three heartbeats, and never less than the worst gap between renewals plus a whole heartbeat:
    a busy worker whose Triton answers slowly, or a starting one, never drops out between two beats."""
    worst = worst_renewal_gap_s(heartbeat_s, readiness_timeout_s)
    return max(REGISTRATION_TTL_BEATS * heartbeat_s, worst + heartbeat_s)


class WorkerRegistry:
    def __init__(self, redis: AsyncRedis, heartbeat_s: float) -> None:
        self._redis = redis
        self.ttl_s = registration_ttl_s(heartbeat_s, readiness_timeout_s(heartbeat_s))
        self._ttl_ms = int(self.ttl_s * 1000)

    async def publish(self, info: WorkerInfo) -> WorkerInfo:
        """Registers or renews a worker; the registration lives `registration_ttl_s`."""
        info = replace(info, heartbeat_ms=now_ms())
        # `async with`: a cluster client learns its slots first, which a MULTI/EXEC needs (redis-py 7.4).
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(worker_key(info.id), mapping=info.hash_fields())
            pipe.pexpire(worker_key(info.id), self._ttl_ms)
            pipe.sadd(WORKERS_KEY, info.id)
            await pipe.execute()
        return info

    async def remove(self, worker_id: str) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(worker_key(worker_id))
            pipe.srem(WORKERS_KEY, worker_id)
            await pipe.execute()

    async def request_load(self, worker_id: str, model: str) -> None:
        await request_model_load(self._redis, worker_id, model)

    async def list(self) -> list[WorkerInfo]:
        """Live registrations; ids whose registration expired are pruned from the set."""
        ids = sorted(await self._redis.smembers(WORKERS_KEY))  # type: ignore[misc]
        if not ids:
            return []
        pipe = self._redis.pipeline(transaction=False)
        for worker_id in ids:
            pipe.hgetall(worker_key(worker_id))
        rows = await pipe.execute()
        expired = [worker_id for worker_id, row in zip(ids, rows, strict=True) if not row]
        if expired:
            await self._redis.srem(WORKERS_KEY, *expired)  # type: ignore[misc]
        return [WorkerInfo.from_hash(row) for row in rows if row]


async def request_model_load(redis: AsyncRedis, worker_id: str, model: str) -> None:
    """Asks a worker to load a model; its registration lists the model once Triton has loaded it.

    The agent fetches the model into its disk cache if needed and may unload its least recently used
    model to stay within its budget. A request for a model already loaded costs the agent nothing.
    """
    key = worker_load_key(worker_id)
    async with redis.pipeline(transaction=True) as pipe:  # `async with`: see WorkerRegistry.publish
        pipe.rpush(key, model)
        pipe.pexpire(key, LOAD_REQUEST_TTL_MS)
        await pipe.execute()
