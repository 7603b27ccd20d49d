"""Scenario 2's baselines: what a user would run instead of Synapse, on the same machine and load.

(a) naive: one Triton request per job, each alone on a GPU (no batching, no queue);
(b) Triton's own dynamic batcher, clients sending batch-1 requests straight to it.
Their figures come from the client's clock and from Triton's own metrics.
"""

from __future__ import annotations

import math
import urllib.request

import numpy as np

from bench.loadgen import Run, TritonTarget
from bench.measure import Figures, lag_note, send_lag_ms
from bench.scenarios import MAX_BATCH, STANDARD, STOP_S, Options, run_open
from bench.stack import BenchStack, gpu_sim_repository

TRITON_QUEUE_DELAY_US = 20_000
TRITON_METRICS = ("nv_inference_count", "nv_inference_exec_count", "nv_inference_compute_infer_duration_us")
NAIVE_MAX_INSTANCES = 32
NAIVE_HEADROOM = 1.25


def _triton_metrics(metrics_url: str) -> dict[str, float]:
    """gpu-sim's counters from Triton's own Prometheus metrics (requests, executions, compute time)."""
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name in TRITON_METRICS and 'model="gpu-sim"' in rest:
            values[name] = float(line.rsplit(" ", 1)[1])
    return values


def _triton_figures(name: str, run: Run, metrics: dict[str, float]) -> Figures:
    done = [s for s in run.samples if s.ok]
    span = max((s.done for s in run.samples), default=run.duration_s)
    requests = metrics.get("nv_inference_count", 0.0)
    executions = metrics.get("nv_inference_exec_count", 0.0)
    # Each request counts its batch's compute time: per request, then once per execution.
    compute_s = metrics.get("nv_inference_compute_infer_duration_us", 0.0) / 1e6
    busy_s = compute_s / requests * executions if requests else 0.0
    mean_batch = requests / executions if executions else math.nan
    return Figures(
        name=name, offered_rate=run.offered_rate, sent=len(run.samples), completed=len(done),
        failed=len(run.samples) - len(done), lost=0, duration_s=span,
        latencies_ms=np.array([s.latency_s * 1000 for s in done], dtype=float),
        busy=busy_s / span if span > 0 else None,
        send_lag_ms=send_lag_ms(run),
        notes=[*lag_note(run), f"Triton's metrics: {executions:,.0f} executions, mean batch "
               f"{mean_batch:.1f}, compute {compute_s / max(1.0, requests) * 1000:.1f} ms per request"],
    )  # fmt: skip


def baseline_dynamic(stack: BenchStack, rate: float, opts: Options) -> Figures:
    """Triton's own dynamic batcher (20 ms queue delay), clients sending batch-1 requests to it."""
    repo = gpu_sim_repository(stack.root / "models-dynamic", base_ms=STANDARD.base_ms, per_item_ms=0,
                              max_batch=MAX_BATCH, queue_delay_us=TRITON_QUEUE_DELAY_US)  # fmt: skip
    url, metrics = stack.start_triton("triton-dynamic", repo)
    try:
        run = run_open(lambda: TritonTarget("triton-dynamic", url), rate, opts.run_s, opts)
        figures = _triton_figures("Triton dynamic batcher", run, _triton_metrics(metrics))
    finally:
        stack.stop("triton-dynamic", timeout_s=STOP_S)
    figures.worker_seconds = figures.duration_s
    figures.cost_per_1000 = 1000 * figures.duration_s * opts.gpu_price / 3600 / max(1, figures.completed)
    return figures


def baseline_naive(stack: BenchStack, rate: float, opts: Options, cold_start_s: float) -> Figures:
    """One request per job, each alone on a GPU: single-batch model instances stand in for GPUs.

    As many instances as the load keeps busy at once (Little's law, with headroom), so no request
    waits for a GPU. This machine holds at most NAIVE_MAX_INSTANCES Python-backend instances; past
    that the baseline runs at the rate they serve. Each request runs alone either way, so its latency
    and its cost do not depend on the rate: that is the naive serverless model."""
    needed = math.ceil(rate * STANDARD.seconds(1) * NAIVE_HEADROOM)
    instances = min(NAIVE_MAX_INSTANCES, needed)
    naive_rate = min(rate, instances / (STANDARD.seconds(1) * NAIVE_HEADROOM))
    repo = gpu_sim_repository(stack.root / "models-naive", base_ms=STANDARD.base_ms, per_item_ms=0,
                              max_batch=MAX_BATCH, instances=instances)  # fmt: skip
    url, metrics_url = stack.start_triton("triton-naive", repo)
    try:
        run = run_open(lambda: TritonTarget("naive", url), naive_rate, opts.run_s, opts)
        metrics = _triton_metrics(metrics_url)
    finally:
        stack.stop("triton-naive", timeout_s=STOP_S)
    figures = _triton_figures("naive (no batching)", run, metrics)
    figures.busy = None  # the instances stand in for GPUs that serverless would start per request
    # Billed per request: the GPU time Triton measured for it, plus its share of cold starts. Each of the
    # rate x T(1) GPUs the load needs (Little's law) starts cold once and stays warm for the run.
    per_request_s = (
        metrics.get("nv_inference_compute_infer_duration_us", 0.0)
        / 1e6
        / max(1.0, metrics.get("nv_inference_count", 0.0))
    )
    cold_share_s = per_request_s * cold_start_s / opts.run_s
    figures.worker_seconds = (per_request_s + cold_share_s) * figures.completed
    figures.cost_per_1000 = 1000 * (per_request_s + cold_share_s) * opts.gpu_price / 3600
    figures.notes += [
        f"{instances} model instances stand in for GPUs; every request runs alone on one",
        f"billed {per_request_s * 1000:.1f} ms of GPU per request (Triton's compute time) plus "
        f"{cold_share_s * 1000:.1f} ms of cold start (a {cold_start_s:.1f} s worker start-up once per GPU, "
        f"warm for the {opts.run_s:.0f} s run); without cold starts "
        f"${1000 * per_request_s * opts.gpu_price / 3600:.5f} per 1,000",
    ]
    if naive_rate < rate:
        figures.notes.append(
            f"run at {naive_rate:,.0f} jobs/s, not {rate:,.0f}: {needed} instances would be needed and this "
            f"machine holds {NAIVE_MAX_INSTANCES}; per-request latency and cost do not depend on the rate"
        )
    return figures
