"""On-demand model loading: a worker loads what the managers ask for and unloads what it used least.

Managers push model names onto the worker's load list in Redis (`request_model_load`); the agent pops
them one at a time, so loads and unloads never race. A load fetches the model into the disk cache,
links it into this worker's Triton repository, and asks Triton through its model-repository API,
which only the agent can call (a per-start secret header). Past `worker_model_budget` loaded models,
the least recently used are unloaded first: recency is Triton's own `last_inference` time from its
statistics API, or the load time for a model that has not run yet, so a model in use is kept even if
it was loaded long ago. On a GPU worker a model that opts in is loaded on the GPU (worker_image/placement.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from contract.jobs import now_ms
from contract.keys import worker_load_key
from contract.redis_client import STORE_ERRORS, AsyncRedis
from worker_image.device import Device
from worker_image.manifest import ModelStoreError, check_model_name
from worker_image.model_store import ModelStore
from worker_image.placement import gpu_override
from worker_image.triton_server import REPOSITORY_API_HEADER

log = logging.getLogger(__name__)

LOAD_TIMEOUT_S = 600.0
UNLOAD_TIMEOUT_S = 60.0
POLL_S = 0.2
BLOCK_S = 1.0

Publish = Callable[[frozenset[str]], Awaitable[None]]


class ModelLoadError(Exception):
    """Triton refused to load or unload a model; the message is Triton's."""


def least_recently_used(recency: Mapping[str, int], keep: int) -> list[str]:
    """The models to unload so that at most `keep` remain: oldest use first (ties by name)."""
    ordered = sorted(recency, key=lambda model: (recency[model], model))
    return ordered[: max(0, len(ordered) - keep)]


class TritonRepository:
    """Triton's model-repository API, with the secret header on every call, and its statistics."""

    def __init__(self, http: aiohttp.ClientSession, base_url: str, secret: str) -> None:
        self._http = http
        self._base = base_url
        self._headers = {REPOSITORY_API_HEADER: secret}

    async def states(self) -> dict[str, str]:
        """Every model in the repository with its state (READY, UNLOADING, UNAVAILABLE, ...)."""
        async with self._http.post(
            f"{self._base}/v2/repository/index", json={}, headers=self._headers
        ) as response:
            if response.status != 200:
                raise ModelLoadError(f"repository index: HTTP {response.status}: {await response.text()}")
            index: list[dict[str, Any]] = await response.json()
        return {entry["name"]: str(entry.get("state", "")) for entry in index}

    async def ready_models(self) -> frozenset[str]:
        return frozenset(name for name, state in (await self.states()).items() if state == "READY")

    async def load(self, model: str, config: str | None = None) -> None:
        """Loads from the repository's files, or with `config` (JSON) in place of the model's config.pbtxt."""
        body = None if config is None else {"parameters": {"config": config}}
        await self._call("load", model, LOAD_TIMEOUT_S, body)

    async def unload(self, model: str) -> None:
        await self._call("unload", model, UNLOAD_TIMEOUT_S)

    async def _call(
        self, action: str, model: str, timeout_s: float, body: dict[str, Any] | None = None
    ) -> None:
        url = f"{self._base}/v2/repository/models/{model}/{action}"
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with self._http.post(url, headers=self._headers, timeout=timeout, json=body) as response:
            if response.status != 200:
                raise ModelLoadError(f"{action} {model}: HTTP {response.status}: {await response.text()}")

    async def last_inference_ms(self) -> dict[str, int]:
        """Per model, when Triton last ran it (0 if never); the statistics API is not restricted."""
        async with self._http.get(f"{self._base}/v2/models/stats") as response:
            if response.status != 200:
                return {}
            stats: dict[str, Any] = await response.json()
        last: dict[str, int] = {}
        for entry in stats.get("model_stats", []):
            name = entry["name"]
            last[name] = max(last.get(name, 0), int(entry.get("last_inference", 0)))
        return last


class ModelLoader:
    """Stages models from the store into this worker's repository and keeps Triton within budget."""

    def __init__(
        self,
        store: ModelStore,
        triton: TritonRepository,
        repository: Path,
        budget: int,
        publish: Publish,
        *,
        device: Device = Device.CPU,
    ) -> None:
        self.store = store
        self.triton = triton
        self.repository = repository
        self.budget = budget
        self._publish = publish
        self.device = device
        self._loaded_ms: dict[str, int] = {}
        self.load_seconds: dict[str, float] = {}  # how long each on-demand load took, for the metrics push

    def stage(self, model: str) -> None:
        """Pins the model (no eviction while this worker may load it), fetches it, links it (blocking)."""
        self.store.pin(model)
        try:
            cached = self.store.ensure(model)
        except BaseException:
            self.store.unpin(model)
            raise
        link = self.repository / model
        if not link.is_symlink():
            link.symlink_to(cached.resolve(), target_is_directory=True)

    def unstage(self, model: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.repository / check_model_name(model)).unlink()
        self.store.unpin(model)

    async def load(self, model: str) -> None:
        """Loads one model, unloading the least recently used first when the budget is full."""
        check_model_name(model)
        loaded = await self.triton.ready_models()
        if model in loaded:
            return
        await asyncio.to_thread(self.stage, model)
        try:
            victims = least_recently_used(await self._recency(loaded), self.budget - 1)
            if victims:
                # Managers stop routing to the victims first; a batch already sent still finishes.
                await self._publish(loaded - set(victims))
                for victim in victims:
                    await self._unload(victim)
            override = await asyncio.to_thread(self.placement, model)
            log.info("loading %s%s", model, " on the GPU" if override else "")
            began = time.monotonic()
            await self.triton.load(model, override)
            self.load_seconds[model] = time.monotonic() - began
        except Exception:
            await asyncio.to_thread(self.unstage, model)
            with contextlib.suppress(ModelLoadError, aiohttp.ClientError, TimeoutError):
                await self._publish(await self.triton.ready_models())
            raise
        self._loaded_ms[model] = now_ms()
        await self._publish(await self.triton.ready_models())
        log.info("loaded %s", model)

    def placement(self, model: str) -> str | None:
        """On a GPU worker, the config override that puts an opted-in model on the GPU; else None."""
        if self.device is not Device.GPU:
            return None
        return gpu_override(self.repository / model)

    async def _recency(self, loaded: frozenset[str]) -> dict[str, int]:
        try:
            last = await self.triton.last_inference_ms()
        except (aiohttp.ClientError, TimeoutError, ValueError):
            last = {}
        return {m: max(last.get(m, 0), self._loaded_ms.get(m, 0)) for m in loaded}

    async def _unload(self, model: str) -> None:
        log.info("unloading %s (least recently used; budget %d)", model, self.budget)
        await self.triton.unload(model)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + UNLOAD_TIMEOUT_S
        # Triton answers at once and unloads when in-flight requests finish; the files stay until then.
        while (await self.triton.states()).get(model) in ("READY", "UNLOADING"):
            if loop.time() > deadline:
                log.warning("%s still unloading after %.0f s; its cache entry stays pinned", model,
                            UNLOAD_TIMEOUT_S)  # fmt: skip
                return
            await asyncio.sleep(POLL_S)
        self._loaded_ms.pop(model, None)
        await asyncio.to_thread(self.unstage, model)

    async def serve(self, redis: AsyncRedis, worker_id: str, first: Sequence[str] = ()) -> None:
        """Loads `first`, then pops load requests until cancelled; one failed load is logged and the
        next one runs."""
        for model in first:
            await self._load_or_log(model, worker_id)
        key = worker_load_key(worker_id)
        while True:
            try:
                popped = await redis.blpop([key], timeout=BLOCK_S)  # type: ignore[misc]
            except STORE_ERRORS as exc:  # Redis restarting: ask again shortly
                log.warning("worker %s: reading load requests failed: %s", worker_id, exc)
                await asyncio.sleep(BLOCK_S)
                continue
            if popped is not None:
                await self._load_or_log(str(popped[1]), worker_id)

    async def _load_or_log(self, model: str, worker_id: str) -> None:
        try:
            await self.load(model)
        except (ModelStoreError, ModelLoadError, aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.error("worker %s: cannot load %s: %s", worker_id, model, exc)
        except Exception:  # a bug in one load must not end the loop that serves the next
            log.exception("worker %s: loading %s failed", worker_id, model)
