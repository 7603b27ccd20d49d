"""Scenarios 1 and 2: sustained load on Synapse (direct and HTTP) and on the two baselines, in one run
on one machine, plus the calibration and the load sweep that check the simulator against the stack.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench import plots
from bench.loadgen import DirectTarget, HttpTarget, Run, Target, TritonTarget, open_loop
from bench.measure import Figures, JobTiming, SweepPoint, pct, read_jobs, synapse_figures
from bench.report import sustained_markdown, sweep_markdown
from bench.simulator import (
    Floats,
    LatencyProfile,
    Overheads,
    SimConfig,
    SimResult,
    poisson_arrivals,
    simulate,
)
from bench.stack import API_KEY, BenchStack, cpu_seconds, gpu_sim_repository
from manager.frontdoor.store import JobStore
from manager.jobs import Job, stream_key
from manager.redis_client import sync_client
from manager.settings import Settings

STANDARD = LatencyProfile(100.0)  # a batch of up to 100 prompts takes 100 ms
LINEAR = LatencyProfile(20.0, 0.5)
MAX_BATCH = 100
TRITON_QUEUE_DELAY_US = 20_000
TRITON_METRICS = ("nv_inference_count", "nv_inference_exec_count", "nv_inference_compute_infer_duration_us")
NAIVE_MAX_INSTANCES = 32
NAIVE_HEADROOM = 1.25
DRAIN_S = 60.0
CALIBRATION_JOBS = 30
CALIBRATION_BATCHES = 6
STOP_S = 5.0  # benchmarks need no graceful worker drain


@dataclass(frozen=True)
class Options:
    out: Path
    quick: bool = False
    duration_s: float = 30.0
    load: float = 0.8  # share of the pool's batched capacity offered in scenario 1
    gpu_price: float = 1.006
    manager_price: float = 0.04937
    progress: bool = True

    @property
    def run_s(self) -> float:
        return 5.0 if self.quick else self.duration_s


@dataclass
class Section:
    """What a scenario hands the report: its Markdown and the figures the targets are judged on."""

    title: str
    markdown: str
    figures: list[Figures] = field(default_factory=list)
    key: dict[str, float] = field(default_factory=dict)


def _settings(stack: BenchStack) -> Settings:
    return Settings.from_env(stack.env())


def _run(make: Callable[[], Target], rate: float, duration_s: float, opts: Options, seed: int = 1) -> Run:
    """An open-loop run; the target is made inside the event loop that drives it."""

    async def body() -> Run:
        target = make()
        try:
            return await open_loop(target, rate, duration_s, seed=seed, progress=opts.progress)
        finally:
            await target.aclose()

    return asyncio.run(body())


def _make_target(kind: str, stack: BenchStack) -> Target:
    return HttpTarget(stack.api, API_KEY) if kind == "http" else DirectTarget(_settings(stack))


def measure_synapse(name: str, kind: str, stack: BenchStack, rate: float, opts: Options, *, workers: int = 1,
                    seed: int = 1) -> tuple[Figures, list[JobTiming]]:  # fmt: skip
    run = _run(lambda: _make_target(kind, stack), rate, opts.run_s, opts, seed)
    wait_drained(stack)
    jobs = read_jobs(stack.redis(), [s.job_id for s in run.samples if s.job_id])
    jobs_in_order: list[JobTiming | None] = []
    by_id = dict(zip([s.job_id for s in run.samples if s.job_id], jobs, strict=True))
    for sample in run.samples:
        jobs_in_order.append(by_id.get(sample.job_id) if sample.job_id else None)
    figures = synapse_figures(name, run, jobs_in_order, workers=workers, gpu_price=opts.gpu_price,
                              manager_price=opts.manager_price)  # fmt: skip
    return figures, [j for j in jobs if j is not None]


def wait_drained(stack: BenchStack, timeout_s: float = DRAIN_S) -> None:
    """Until every submitted job has its outcome (a stream entry lives until then), or the timeout."""
    client, deadline = stack.redis(), time.monotonic() + timeout_s
    while client.xlen(stream_key("gpu-sim")) and time.monotonic() < deadline:
        time.sleep(0.1)


def calibrate(stack: BenchStack, profile: LatencyProfile, jobs: int = CALIBRATION_JOBS) -> Overheads:
    """Per-batch overheads measured on the stack. Jobs sent one at a time, each alone on an idle worker,
    give the read (submit to batch start) and the round trip beyond T(1); full batches queued back to
    back give the worker's own cost per batch beyond T(b) (completion to completion)."""
    store = JobStore(sync_client(_settings(stack)), 3600, 100_000)
    alone: list[JobTiming] = []
    for index in range(jobs):
        job = _job(f"calibration {index}")
        store.submit(job)
        store.wait(job.id, 10)
        alone += [t for t in read_jobs(stack.redis(), [job.id]) if t is not None and t.status == "COMPLETED"]
    burst = [_job(f"calibration burst {i}") for i in range(CALIBRATION_BATCHES * MAX_BATCH)]
    for job in burst:
        store.submit(job)
    wait_drained(stack)
    full = sorted(
        {
            (t.completed_ms, t.batch_size)
            for t in read_jobs(stack.redis(), [j.id for j in burst])
            if t is not None
        }
    )
    cycles = [b[0] - a[0] for a, b in itertools.pairwise(full) if b[1] == MAX_BATCH]
    exec_s = max(0.0, pct(cycles, 50) / 1000 - profile.seconds(MAX_BATCH)) if cycles else 0.0
    if not alone:
        return Overheads(exec_s=exec_s)
    read = pct([t.started_ms - t.created_ms for t in alone], 50) / 1000
    rpc = max(
        0.0, pct([t.completed_ms - t.started_ms for t in alone], 50) / 1000 - profile.seconds(1) - exec_s
    )
    return Overheads(read_s=read, send_s=rpc / 2, reply_s=rpc / 2, exec_s=exec_s)


def _job(prompt: str) -> Job:
    return Job.new(model="gpu-sim", prompt=prompt, max_tokens=16, parameters={}, timeout_ms=60_000)


def predicted(
    jobs: list[JobTiming], profile: LatencyProfile, overheads: Overheads, *, workers: int = 1,
    max_wait_s: float = 0.020, max_inflight: int = 2,
) -> SimResult:  # fmt: skip
    """The simulator on the very arrival times the stack saw."""
    created = np.array(sorted(j.created_ms for j in jobs), dtype=float) / 1000
    arrivals: Floats = created - created[0] if len(created) else created
    config = SimConfig(profile=profile, max_batch=MAX_BATCH, max_wait_s=max_wait_s, max_inflight=max_inflight,
                       workers=workers, overheads=overheads)  # fmt: skip
    return simulate(config, arrivals)


def start_synapse(stack: BenchStack, profile: LatencyProfile, tag: str) -> float:
    """A worker with the profile and a manager; returns the worker's start-up time (a cold start)."""
    repo = gpu_sim_repository(stack.root / f"models-{tag}", base_ms=profile.base_ms,
                              per_item_ms=profile.per_item_ms, max_batch=MAX_BATCH)  # fmt: skip
    started = time.monotonic()
    stack.start_worker(f"worker-{tag}", repo)
    cold_start = time.monotonic() - started
    stack.start_manager(f"manager-{tag}")
    return cold_start


def stop_synapse(stack: BenchStack, tag: str) -> None:
    stack.stop(f"manager-{tag}")
    stack.stop(f"worker-{tag}", timeout_s=STOP_S)


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
        notes=[f"Triton's metrics: {executions:,.0f} executions, mean batch {mean_batch:.1f}, "
               f"compute {compute_s / max(1.0, requests) * 1000:.1f} ms per request"],
    )  # fmt: skip


def baseline_dynamic(stack: BenchStack, rate: float, opts: Options) -> Figures:
    """Triton's own dynamic batcher (20 ms queue delay), clients sending batch-1 requests to it."""
    repo = gpu_sim_repository(stack.root / "models-dynamic", base_ms=STANDARD.base_ms, per_item_ms=0,
                              max_batch=MAX_BATCH, queue_delay_us=TRITON_QUEUE_DELAY_US)  # fmt: skip
    url, metrics = stack.start_triton("triton-dynamic", repo)
    try:
        run = _run(lambda: TritonTarget("triton-dynamic", url), rate, opts.run_s, opts)
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
        run = _run(lambda: TritonTarget("naive", url), naive_rate, opts.run_s, opts)
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


def sustained(opts: Options) -> Section:
    """Scenario 1 and 2 in one run: Synapse direct and HTTP, the linear profile, and both baselines."""
    rate = opts.load * STANDARD.capacity(MAX_BATCH)
    rows: list[Figures] = []
    sims: dict[str, SimResult] = {}
    with BenchStack(opts.out / "raw" / "sustained") as stack:
        stack.start_redis()
        cold_start = start_synapse(stack, STANDARD, "std")
        stack.start_gateway()
        overheads = calibrate(stack, STANDARD)
        for name, kind in (("Synapse direct", "direct"), ("Synapse HTTP", "http")):
            gateway_cpu = cpu_seconds(stack.pid("gateway"))
            figures, jobs = measure_synapse(name, kind, stack, rate, opts)
            if kind == "http":
                per_job = (cpu_seconds(stack.pid("gateway")) - gateway_cpu) / max(1, figures.sent)
                cores = f"{per_job * rate:.1f} cores at {rate:,.0f} jobs/s, on a machine of {os.cpu_count()}"
                figures.notes.append(
                    f"the local gateway used {per_job * 1000:.2f} ms of CPU per job (a POST and its "
                    f"long-poll GET): {cores}"
                )
            rows.append(figures)
            sims[name] = predicted(jobs, STANDARD, overheads)
        stop_synapse(stack, "std")
        linear_rate = opts.load * LINEAR.capacity(MAX_BATCH)
        start_synapse(stack, LINEAR, "lin")
        figures, jobs = measure_synapse(f"Synapse direct, T(b) = {LINEAR.describe()}", "direct", stack,
                                        linear_rate, opts)  # fmt: skip
        rows.append(figures)
        sims[figures.name] = predicted(jobs, LINEAR, overheads)
        stop_synapse(stack, "lin")
        rows.append(baseline_dynamic(stack, rate, opts))
        rows.append(baseline_naive(stack, rate, opts, cold_start))
    cdf = plots.latency_cdf(opts.out / "latency-cdf.png", {f.name: f.latencies_ms for f in rows})
    markdown = sustained_markdown(rows, sims, overheads, rate=rate, cdf=cdf)
    direct, http, _, dynamic, naive = rows
    key = {
        "p99_direct_ms": direct.p(99), "p99_http_ms": http.p(99), "busy_direct": direct.busy or 0.0,
        "p99_dynamic_ms": dynamic.p(99), "cost_direct": direct.cost_per_1000 or math.nan,
        "cost_naive": naive.cost_per_1000 or math.nan, "lost": float(sum(f.lost for f in rows[:3])),
        "cold_start_s": cold_start,
    }  # fmt: skip
    return Section("Sustained load and baselines (scenarios 1 and 2)", markdown, rows, key)


def sweep(stack: BenchStack, profile: LatencyProfile, levels: list[float], opts: Options) -> list[SweepPoint]:
    """Direct submission at each share of one worker's capacity, then the simulator on the same arrivals.
    The stack must have Redis, one worker with `profile` and a manager running."""
    overheads = calibrate(stack, profile)
    points = []
    for level in levels:
        rate = level * profile.capacity(MAX_BATCH)
        figures, jobs = measure_synapse(f"{level:.0%} load", "direct", stack, rate, opts)
        points.append(SweepPoint(rate, figures, predicted(jobs, profile, overheads), overheads))
    return points


def load_sweep(opts: Options, levels: list[float] | None = None) -> Section:
    """Latency and busy share against offered load, measured and simulated: the planner's validation."""
    levels = levels or [0.2, 0.5, 0.8]
    with BenchStack(opts.out / "raw" / "sweep") as stack:
        stack.start_redis()
        start_synapse(stack, STANDARD, "sweep")
        points = sweep(stack, STANDARD, levels, opts)
    png = plots.load_sweep(
        opts.out / "load-sweep.png", points, simulated_curve(STANDARD, points[0].overheads)
    )
    worst = max((max(p.errors()) for p in points), default=math.nan)
    key = {"validation_worst_error": worst}
    return Section("Load sweep: the planner against the stack", sweep_markdown(points, png), key=key)


def simulated_curve(
    profile: LatencyProfile, overheads: Overheads, points: int = 12
) -> dict[str, list[float]]:
    """The simulator's P50, P99 and busy share from 5 % to 95 % of one worker's capacity."""
    curve: dict[str, list[float]] = {"rate": [], "p50": [], "p99": [], "busy": []}
    for share in np.linspace(0.05, 0.95, points):
        rate = float(share) * profile.capacity(MAX_BATCH)
        config = SimConfig(profile=profile, max_batch=MAX_BATCH, overheads=overheads, warmup_s=2)
        result = simulate(config, poisson_arrivals(rate, 30, seed=int(share * 100)))
        curve["rate"].append(rate)
        curve["p50"].append(result.percentile_ms(50))
        curve["p99"].append(result.percentile_ms(99))
        curve["busy"].append(result.busy_ratio)
    return curve
