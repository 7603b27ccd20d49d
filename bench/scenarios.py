"""What the scenarios share (options, runs, measuring Synapse, calibration, the simulator on measured
arrivals), and the load sweep that checks the simulator against the stack.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from bench import plots
from bench.loadgen import DirectTarget, HttpTarget, Run, Target, open_loop
from bench.measure import Figures, JobTiming, SweepPoint, Trial, pct, read_jobs, synapse_figures
from bench.report import sweep_markdown
from bench.stack import API_KEY, BenchStack, gpu_sim_repository
from contract.job_store import JobStore
from contract.jobs import Job
from contract.keys import stream_key
from contract.redis_client import sync_client
from contract.settings import Settings
from planner.simulator import (
    Floats,
    LatencyProfile,
    Overheads,
    SimConfig,
    SimResult,
    poisson_arrivals,
    simulate,
)

STANDARD = LatencyProfile(100.0)  # a batch of up to 100 prompts takes 100 ms
LINEAR = LatencyProfile(20.0, 0.5)
MAX_BATCH = 100
DRAIN_S = 60.0
CALIBRATION_JOBS = 30
SWEEP_RUN_S = 21.0  # per load level, split into SWEEP_TRIALS runs
SWEEP_TRIALS = 3
CALIBRATION_BATCHES = 11  # ten completion-to-completion cycles: one stall cannot move their median
STOP_S = 5.0  # benchmarks need no graceful worker drain


@dataclass(frozen=True)
class Options:
    out: Path
    quick: bool = False
    duration_s: float = 30.0
    load: float = 0.8  # share of the pool's batched capacity offered in scenario 1
    gpu_price: float = Settings.model_fields["gpu_price_per_hour"].default
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
    former_titles: tuple[str, ...] = ()  # earlier titles of this section: publishing replaces them


def _settings(stack: BenchStack) -> Settings:
    return Settings.from_env(stack.env())


def run_open(make: Callable[[], Target], rate: float, duration_s: float, opts: Options, seed: int = 1) -> Run:
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
    """An open-loop run through HTTP or direct submission, measured."""
    run = run_open(lambda: _make_target(kind, stack), rate, opts.run_s, opts, seed)
    return figures_of(name, run, stack, opts, workers=workers)


def figures_of(
    name: str, run: Run, stack: BenchStack, opts: Options, *, workers: int = 1
) -> tuple[Figures, list[JobTiming]]:
    """A finished run's figures, once every job it submitted has its outcome (or the drain timed out)."""
    wait_drained(stack)
    submitted = [s.job_id for s in run.samples if s.job_id]
    by_id = dict(zip(submitted, read_jobs(stack.redis(), submitted), strict=True))
    in_order = [by_id.get(s.job_id) if s.job_id else None for s in run.samples]
    figures = synapse_figures(name, run, in_order, workers=workers, gpu_price=opts.gpu_price,
                              manager_price=opts.manager_price)  # fmt: skip
    return figures, [j for j in by_id.values() if j is not None]


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
    return Job.new(model="gpu-sim", prompt=prompt, max_tokens=16, timeout_ms=60_000)


def predicted(
    jobs: list[JobTiming], profile: LatencyProfile, overheads: Overheads, *, workers: int = 1,
    max_wait_s: float = 0.020, max_inflight: int = 2,
) -> SimResult:  # fmt: skip
    """The simulator on the very arrival times the stack saw, its manager as warm as the stack's: that one
    has timed batches of this model before the run (calibration, earlier runs), so it starts knowing
    the batch time, here T(b) at the run's median batch plus the measured per-batch overheads."""
    created = np.array(sorted(j.created_ms for j in jobs), dtype=float) / 1000
    arrivals: Floats = created - created[0] if len(created) else created
    typical = int(np.median([j.batch_size for j in jobs])) if jobs else 1
    batch_s = profile.seconds(typical) + overheads.exec_s + overheads.send_s + overheads.reply_s
    config = SimConfig(profile=profile, max_batch=MAX_BATCH, max_wait_s=max_wait_s, max_inflight=max_inflight,
                       workers=workers, overheads=overheads, batch_time_s=batch_s)  # fmt: skip
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


def sweep(
    stack: BenchStack, profile: LatencyProfile, levels: list[float], opts: Options, trials: int = SWEEP_TRIALS
) -> list[SweepPoint]:
    """Direct submission at each share of one worker's capacity, `trials` runs of `opts.run_s` each,
    then the simulator on each run's arrivals. The stack must have Redis, one worker with `profile`
    and a manager running."""
    overheads = calibrate(stack, profile)
    points = []
    for level in levels:
        rate = level * profile.capacity(MAX_BATCH)
        runs = []
        for trial in range(trials):
            name = f"{level:.0%} load, trial {trial + 1}"
            figures, jobs = measure_synapse(name, "direct", stack, rate, opts, seed=trial + 1)
            runs.append(Trial(figures, predicted(jobs, profile, overheads)))
        points.append(SweepPoint(rate, tuple(runs), overheads))
    return points


def load_sweep(opts: Options, levels: list[float] | None = None) -> Section:
    """Latency and busy share against offered load, measured and simulated: the planner's validation."""
    levels = levels or [0.2, 0.5, 0.8]
    opts = replace(opts, duration_s=min(opts.duration_s, SWEEP_RUN_S) / SWEEP_TRIALS)
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
