"""The worker's own metrics, pushed to the Pushgateway about once a heartbeat.

Workers come and go with the load, down to zero, so they push rather than wait to be scraped; the
group (job `synapse-worker`, grouping key `worker`) is deleted when the worker deregisters. The
families are defined in `worker_image/worker_metrics.py`; this module fills them from Triton's own metrics
endpoint and the agent's timings. Nothing here may stop the worker: a failed scrape or push is
logged and tried again at the next beat.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import aiohttp
from prometheus_client import delete_from_gateway, push_to_gateway
from prometheus_client.parser import text_string_to_metric_families

from contract.metric_families import WORKER_PUSH_JOB
from contract.time_limit import stop
from worker_image import worker_metrics

log = logging.getLogger(__name__)

PUSH_TIMEOUT_S = 2.0
GPU_UTILIZATION = "nv_gpu_utilization"
COMPUTE_US = "nv_inference_compute_infer_duration_us"
EXECUTIONS = "nv_inference_exec_count"
REQUESTS = "nv_inference_request_success"
INFERENCES = "nv_inference_count"
# The synapse_llm engine's prefix cache, by model (the parser names a counter's family without _total).
PREFIX_QUERIES = "synapse_engine_prefix_cache_queries_tokens"
PREFIX_HITS = "synapse_engine_prefix_cache_hits_tokens"
PREFIX_EVICTED = "synapse_engine_prefix_cache_evicted_blocks"
KV_USAGE = "synapse_engine_kv_cache_usage"
KV_CACHED = "synapse_engine_kv_blocks_cached"
PER_MODEL = (
    COMPUTE_US, EXECUTIONS, REQUESTS, INFERENCES, PREFIX_QUERIES, PREFIX_HITS, PREFIX_EVICTED, KV_USAGE,
    KV_CACHED,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class TritonCounters:
    """Triton's counters at one moment (monotonic seconds), summed per model over versions."""

    at: float
    gpu_utilization: float | None = None  # mean over the GPUs; None without a GPU
    per_model: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # family -> model -> value

    def of(self, family: str) -> Mapping[str, float]:
        return self.per_model.get(family, {})


def parse_triton_metrics(text: str, at: float) -> TritonCounters:
    per_model: dict[str, defaultdict[str, float]] = {name: defaultdict(float) for name in PER_MODEL}
    gpus: list[float] = []
    for family in text_string_to_metric_families(text):
        if family.name == GPU_UTILIZATION:
            gpus += [sample.value for sample in family.samples]
        elif family.name in per_model:
            for sample in family.samples:
                per_model[family.name][sample.labels.get("model", "")] += sample.value
    return TritonCounters(
        at=at,
        gpu_utilization=sum(gpus) / len(gpus) if gpus else None,
        per_model={name: dict(values) for name, values in per_model.items()},
    )


def utilization(previous: TritonCounters | None, current: TritonCounters) -> tuple[float | None, str]:
    """The GPU's utilisation where Triton reports one; otherwise compute time over wall time.

    Triton adds an execution's compute time to every request in it, so when its own batcher merges
    requests, the time is scaled by executions per request to count each execution once.
    """
    if current.gpu_utilization is not None:
        return min(1.0, max(0.0, current.gpu_utilization)), "gpu"
    if previous is None or current.at <= previous.at:
        return None, "compute"
    busy_us = 0.0
    for model, compute_us in current.of(COMPUTE_US).items():
        spent = compute_us - previous.of(COMPUTE_US).get(model, 0.0)
        requests = current.of(REQUESTS).get(model, 0.0) - previous.of(REQUESTS).get(model, 0.0)
        executions = current.of(EXECUTIONS).get(model, 0.0) - previous.of(EXECUTIONS).get(model, 0.0)
        if spent > 0 and requests > 0 and executions > 0:  # a restarted Triton resets its counters
            busy_us += spent * min(1.0, executions / requests)
    return min(1.0, busy_us / 1e6 / (current.at - previous.at)), "compute"


class MetricsPusher:
    """`start()` pushes every `interval_s`; `aclose()` stops and deletes this worker's group."""

    def __init__(self, gateway_url: str, worker_id: str, triton_metrics_url: str, interval_s: float) -> None:
        self._gateway_url = gateway_url
        self._grouping = {"worker": worker_id}
        self._triton_metrics_url = triton_metrics_url
        self._interval_s = interval_s
        self._registry, self._collector = worker_metrics.worker_registry()
        self._previous: TritonCounters | None = None
        self._http: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing: set[str] = set()
        self.model_load_seconds: dict[str, float] = {}
        self.cold_start_seconds: float | None = None

    async def start(self) -> None:
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PUSH_TIMEOUT_S))
        self._task = asyncio.create_task(self._loop(), name="metrics-push")

    async def _loop(self) -> None:
        while True:
            await self.push_once()
            await asyncio.sleep(self._interval_s)

    async def push_once(self) -> None:
        counters = await self._scrape_triton()
        util, source = (None, "") if counters is None else utilization(self._previous, counters)
        last = counters or self._previous
        self._collector.sample = worker_metrics.WorkerSample(
            utilization={} if util is None else {source: util},
            batches=dict(last.of(EXECUTIONS)) if last else {},
            inferences=dict(last.of(INFERENCES)) if last else {},
            prefix_cache_queried_tokens=dict(last.of(PREFIX_QUERIES)) if last else {},
            prefix_cache_hit_tokens=dict(last.of(PREFIX_HITS)) if last else {},
            prefix_cache_evicted_blocks=dict(last.of(PREFIX_EVICTED)) if last else {},
            kv_cache_usage=dict(last.of(KV_USAGE)) if last else {},
            kv_blocks_cached=dict(last.of(KV_CACHED)) if last else {},
            model_load_seconds=dict(self.model_load_seconds),
            cold_start_seconds=self.cold_start_seconds,
        )
        if counters is not None:
            self._previous = counters
        await self._call(
            "push to the Pushgateway",
            push_to_gateway,
            self._gateway_url,
            job=WORKER_PUSH_JOB,
            registry=self._registry,
            grouping_key=self._grouping,
            timeout=PUSH_TIMEOUT_S,
        )

    async def _scrape_triton(self) -> TritonCounters | None:
        if self._http is None:
            return None
        try:
            async with self._http.get(self._triton_metrics_url) as response:
                response.raise_for_status()
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._report("read Triton's metrics", exc)
            return None
        self._recovered("read Triton's metrics")
        return parse_triton_metrics(text, time.monotonic())

    async def _call(self, what: str, func: Callable[..., object], *args: object, **kwargs: object) -> None:
        try:
            await asyncio.to_thread(func, *args, **kwargs)
        except Exception as exc:  # urllib, sockets, HTTP errors: all mean "not this time"
            self._report(what, exc)
            return
        self._recovered(what)

    def _report(self, what: str, exc: BaseException) -> None:
        """The first failure of a kind is a warning; repeats are debug until it works again."""
        level = logging.DEBUG if what in self._failing else logging.WARNING
        log.log(level, "worker %s: could not %s: %s", self._grouping["worker"], what, exc)
        self._failing.add(what)

    def _recovered(self, what: str) -> None:
        if what in self._failing:
            self._failing.discard(what)
            log.info("worker %s: %s works again", self._grouping["worker"], what)

    async def aclose(self) -> None:
        if self._task is not None:
            await stop(self._task)
            await self._call(
                "delete its Pushgateway group",
                delete_from_gateway,
                self._gateway_url,
                job=WORKER_PUSH_JOB,
                grouping_key=self._grouping,
                timeout=PUSH_TIMEOUT_S,
            )
        if self._http is not None:
            await self._http.close()
