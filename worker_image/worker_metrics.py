"""The metric families each worker pushes to the Pushgateway (grouping key: worker id)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from contract.metric_families import FamilySpec, families


@dataclass(frozen=True, slots=True)
class WorkerSample:
    """A worker's own view, taken from Triton's metrics and its agent's timings."""

    utilization: Mapping[str, float] = field(default_factory=dict)  # source ("gpu" or "compute") -> ratio
    batches: Mapping[str, float] = field(default_factory=dict)
    inferences: Mapping[str, float] = field(default_factory=dict)
    prefix_cache_queried_tokens: Mapping[str, float] = field(default_factory=dict)
    prefix_cache_hit_tokens: Mapping[str, float] = field(default_factory=dict)
    prefix_cache_evicted_blocks: Mapping[str, float] = field(default_factory=dict)
    kv_cache_usage: Mapping[str, float] = field(default_factory=dict)
    kv_blocks_cached: Mapping[str, float] = field(default_factory=dict)
    model_load_seconds: Mapping[str, float] = field(default_factory=dict)
    cold_start_seconds: float | None = None


WORKER_FAMILIES: tuple[FamilySpec, ...] = (
    ("gauge", "synapse_worker_utilization_ratio", "GPU busy fraction (source=gpu, nv_gpu_utilization), or "
     "Triton compute time over wall time without a GPU (source=compute)", "source", "utilization"),
    ("counter", "synapse_worker_batches_executed", "Model executions on this worker (Triton's count)",
     "model", "batches"),
    ("counter", "synapse_worker_inferences", "Inferences on this worker (Triton's count)", "model",
     "inferences"),
    ("counter", "synapse_worker_prefix_cache_queried_tokens", "Prompt tokens the engine looked up in its "
     "prefix cache", "model", "prefix_cache_queried_tokens"),
    ("counter", "synapse_worker_prefix_cache_hit_tokens", "Prompt tokens the engine found in its prefix "
     "cache and did not compute again", "model", "prefix_cache_hit_tokens"),
    ("counter", "synapse_worker_prefix_cache_evicted_blocks", "Cached KV blocks the engine evicted for "
     "live sequences", "model", "prefix_cache_evicted_blocks"),
    ("gauge", "synapse_worker_kv_cache_usage_ratio", "Share of the engine's KV cache that live sequences "
     "hold", "model", "kv_cache_usage"),
    ("gauge", "synapse_worker_kv_blocks_cached", "KV blocks the engine keeps only for later prompts",
     "model", "kv_blocks_cached"),
    ("gauge", "synapse_worker_model_load_seconds", "Time Triton took to load the model", "model",
     "model_load_seconds"),
    ("gauge", "synapse_worker_cold_start_seconds", "Agent start to READY: model sync, Triton start, model "
     "loads", None, "cold_start_seconds"),
)  # fmt: skip


class WorkerCollector(Collector):
    def __init__(self) -> None:
        self.sample = WorkerSample()

    def collect(self) -> Iterator[Metric]:
        return families(WORKER_FAMILIES, self.sample)


def worker_registry() -> tuple[CollectorRegistry, WorkerCollector]:
    """A fresh registry holding only the worker's families, for push_to_gateway."""
    registry = CollectorRegistry(auto_describe=False)
    collector = WorkerCollector()
    registry.register(collector)
    return registry, collector
