"""The worker's metrics: Triton's exposition read into counters, utilisation derived, model loads timed."""

import pytest
from prometheus_client import generate_latest

from worker_image import worker_metrics
from worker_image.metrics_push import parse_triton_metrics, utilization

# The shape of Triton 2.x's /metrics on CPU (taken from the pytriton wheel's server), values set.
TRITON_CPU = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{{model="gpu-sim",version="1"}} {requests}
nv_inference_request_success{{model="tiny-gpt2",version="1"}} 0
# HELP nv_inference_count Number of inferences performed (does not include cached requests)
# TYPE nv_inference_count counter
nv_inference_count{{model="gpu-sim",version="1"}} {inferences}
nv_inference_count{{model="tiny-gpt2",version="1"}} 0
# HELP nv_inference_exec_count Number of model executions performed (does not include cached requests)
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{{model="gpu-sim",version="1"}} {executions}
nv_inference_exec_count{{model="tiny-gpt2",version="1"}} 0
# HELP nv_inference_compute_infer_duration_us Cumulative compute inference duration in microseconds
# TYPE nv_inference_compute_infer_duration_us counter
nv_inference_compute_infer_duration_us{{model="gpu-sim",version="1"}} {compute_us}
nv_inference_compute_infer_duration_us{{model="tiny-gpt2",version="1"}} 0
# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]
# TYPE nv_cpu_utilization gauge
nv_cpu_utilization 0.25
"""
GPU_LINES = """\
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-1"} 0.8
nv_gpu_utilization{gpu_uuid="GPU-2"} 0.6
"""


def triton(requests: int, executions: int, compute_us: int, inferences: int = 0) -> str:
    return TRITON_CPU.format(
        requests=requests, executions=executions, compute_us=compute_us, inferences=inferences or requests
    )


def test_triton_counters_are_read_per_model():
    counters = parse_triton_metrics(triton(10, 10, 500_000, inferences=640), at=1.0)
    assert counters.gpu_utilization is None
    assert counters.of("nv_inference_exec_count") == {"gpu-sim": 10, "tiny-gpt2": 0}
    assert counters.of("nv_inference_count")["gpu-sim"] == 640


def test_without_a_gpu_utilisation_is_compute_time_over_wall_time():
    before = parse_triton_metrics(triton(10, 10, 1_000_000), at=100.0)
    after = parse_triton_metrics(triton(30, 30, 1_700_000), at=102.0)
    assert utilization(before, after) == (pytest.approx(0.35), "compute")
    assert utilization(None, after) == (None, "compute"), "one reading has no interval"


def test_requests_merged_into_one_execution_count_its_time_once():
    before = parse_triton_metrics(triton(0, 0, 0), at=0.0)
    after = parse_triton_metrics(triton(40, 10, 4_000_000), at=4.0)  # 4 requests per execution
    assert utilization(before, after)[0] == pytest.approx(0.25)


def test_a_restarted_triton_does_not_give_negative_utilisation():
    before = parse_triton_metrics(triton(100, 100, 9_000_000), at=0.0)
    after = parse_triton_metrics(triton(1, 1, 10_000), at=2.0)
    assert utilization(before, after)[0] == 0.0


def test_the_gpu_s_own_utilisation_wins_where_there_is_one():
    counters = parse_triton_metrics(triton(1, 1, 1) + GPU_LINES, at=1.0)
    assert utilization(None, counters) == (pytest.approx(0.7), "gpu")


# The synapse_llm engine's own families on the same page (triton_backends/synapse_llm/engine_stream.py).
ENGINE_LINES = """\
# HELP synapse_engine_prefix_cache_queries_tokens_total prompt tokens looked up in the prefix cache
# TYPE synapse_engine_prefix_cache_queries_tokens_total counter
synapse_engine_prefix_cache_queries_tokens_total{model="smollm2-135m-instruct"} 4000
# HELP synapse_engine_prefix_cache_hits_tokens_total prompt tokens found in the prefix cache
# TYPE synapse_engine_prefix_cache_hits_tokens_total counter
synapse_engine_prefix_cache_hits_tokens_total{model="smollm2-135m-instruct"} 3200
# HELP synapse_engine_kv_blocks_cached KV blocks kept only for later prompts
# TYPE synapse_engine_kv_blocks_cached gauge
synapse_engine_kv_blocks_cached{model="smollm2-135m-instruct"} 21
"""


def test_the_engine_s_prefix_cache_reaches_the_worker_s_pushed_families():
    counters = parse_triton_metrics(triton(1, 1, 1) + ENGINE_LINES, at=1.0)
    registry, collector = worker_metrics.worker_registry()
    collector.sample = worker_metrics.WorkerSample(
        prefix_cache_queried_tokens=counters.of("synapse_engine_prefix_cache_queries_tokens"),
        prefix_cache_hit_tokens=counters.of("synapse_engine_prefix_cache_hits_tokens"),
        kv_blocks_cached=counters.of("synapse_engine_kv_blocks_cached"),
    )
    text = generate_latest(registry).decode()
    assert 'synapse_worker_prefix_cache_queried_tokens_total{model="smollm2-135m-instruct"} 4000.0' in text
    assert 'synapse_worker_prefix_cache_hit_tokens_total{model="smollm2-135m-instruct"} 3200.0' in text
    assert 'synapse_worker_kv_blocks_cached{model="smollm2-135m-instruct"} 21.0' in text


def test_the_pushed_exposition_carries_every_worker_family():
    registry, collector = worker_metrics.worker_registry()
    collector.sample = worker_metrics.WorkerSample(
        utilization={"compute": 0.4},
        batches={"gpu-sim": 12.0},
        inferences={"gpu-sim": 700.0},
        model_load_seconds={"gpu-sim": 1.5},
        cold_start_seconds=9.0,
    )
    text = generate_latest(registry).decode()
    assert 'synapse_worker_utilization_ratio{source="compute"} 0.4' in text
    assert 'synapse_worker_batches_executed_total{model="gpu-sim"} 12.0' in text
    assert 'synapse_worker_inferences_total{model="gpu-sim"} 700.0' in text
    assert 'synapse_worker_model_load_seconds{model="gpu-sim"} 1.5' in text
    assert "synapse_worker_cold_start_seconds 9.0" in text
    assert "worker=" not in text, "the Pushgateway's grouping key adds the worker label"
