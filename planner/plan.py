"""`synapse plan`: the smallest pool that meets a P99 latency SLO, found with the simulator.

The simulator runs the manager's own batching policy, so the answer follows the manager's settings
(batching window, batches in flight per worker) as well as the model's latency profile. With
`--batch-share`, that share of the jobs is sent as batch priority: the SLO is the interactive jobs'.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

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

# Fargate, 1 vCPU and 2 GB, us-east-1, on demand: what one manager task costs.
MANAGER_PRICE_PER_HOUR = 0.04937
# A manager's CPU per job with full batches (`synapse bench manager` measures it), and how busy one is
# allowed to run: the planner's estimate of the managers a load needs.
MANAGER_CPU_S_PER_JOB = 0.0002
MANAGER_TARGET_BUSY = 0.7
# Measured on the local stack (bench.calibrate); the planner's default for a production network.
DEFAULT_OVERHEADS = Overheads(read_s=0.001, send_s=0.001, reply_s=0.001)
MAX_SEARCH_WORKERS = 100_000


@dataclass(frozen=True, slots=True)
class PlanRequest:
    profile: LatencyProfile
    max_batch: int
    slo_p99_s: float
    rate: float = 0.0  # jobs per second (Poisson), unless a trace is given
    trace: Floats | None = None  # arrival times in seconds
    gpu_price_per_hour: float = Settings.model_fields["gpu_price_per_hour"].default
    manager_price_per_hour: float = MANAGER_PRICE_PER_HOUR
    manager_cpu_s_per_job: float = MANAGER_CPU_S_PER_JOB
    max_wait_s: float = 0.020
    max_inflight: int = 2
    overheads: Overheads = DEFAULT_OVERHEADS
    duration_s: float = 60.0
    seed: int = 1
    batch_share: float = 0.0  # of the jobs, sent as batch priority (their deadline: SimConfig's default)

    def arrivals(self) -> Floats:
        if self.trace is not None:
            return np.sort(self.trace - float(np.min(self.trace)))
        return poisson_arrivals(self.rate, self.duration_s, self.seed)


@dataclass(frozen=True, slots=True)
class Plan:
    request: PlanRequest
    workers: int
    rate: float
    result: SimResult
    meets_slo: bool

    @property
    def managers(self) -> int:
        """Manager processes (one core each) to move the load at MANAGER_TARGET_BUSY."""
        return max(1, math.ceil(self.rate * self.request.manager_cpu_s_per_job / MANAGER_TARGET_BUSY))

    @property
    def cost_per_hour(self) -> float:
        return (
            self.workers * self.request.gpu_price_per_hour
            + self.managers * self.request.manager_price_per_hour
        )

    @property
    def cost_per_1000(self) -> float:
        return self.cost_per_hour / (self.rate * 3600) * 1000

    @property
    def naive_gpus(self) -> float:
        """One GPU per request in flight (Little's law): every request runs alone for T(1)."""
        return self.rate * self.request.profile.seconds(1)

    @property
    def naive_cost_per_1000(self) -> float:
        """Each request billed its own GPU time T(1), cold starts not counted: a lower bound."""
        return 1000 * self.request.profile.seconds(1) * self.request.gpu_price_per_hour / 3600

    def table(self) -> str:
        r, req = self.result, self.request
        verdict = "meets" if self.meets_slo else "MISSES"
        share = f"{req.batch_share:.0%} of the jobs, P99 {r.percentile_ms(99, batch=True):.0f} ms"
        batch = [("batch priority", share)] if req.batch_share else []
        rows = [
            ("arrival rate", f"{self.rate:,.0f} jobs/s"),
            ("latency profile T(b)", f"{req.profile.describe()}, max batch {req.max_batch}"),
            ("manager settings", f"window {req.max_wait_s * 1e3:g} ms, {req.max_inflight} batches in flight"),
            (
                "managers",
                f"{self.managers} (at {req.manager_cpu_s_per_job * 1e3:g} ms of CPU per job, "
                f"{MANAGER_TARGET_BUSY:.0%} busy)",
            ),
            ("workers needed", f"**{self.workers}** ({verdict} P99 <= {req.slo_p99_s * 1e3:g} ms)"),
            ("predicted P50 / P99", f"{r.percentile_ms(50):.0f} ms / {r.percentile_ms(99):.0f} ms"),
            ("busy", f"{r.busy_ratio:.0%}"),
            ("mean batch", f"{float(np.mean(r.batch_sizes)):.1f}"),
            *batch,
            ("cost per hour", f"${self.cost_per_hour:,.2f}"),
            ("cost per 1,000 inferences", f"${self.cost_per_1000:.6f}"),
            ("naive: one GPU per request", f"{self.naive_gpus:,.0f} GPUs"),
            ("naive cost per 1,000", f"${self.naive_cost_per_1000:.4f} (T(1) per request, no cold starts)"),
        ]
        return "\n".join(["| | |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in rows)])


def evaluate(request: PlanRequest, workers: int, arrivals: Floats) -> SimResult:
    config = SimConfig(
        profile=request.profile,
        max_batch=request.max_batch,
        max_wait_s=request.max_wait_s,
        max_inflight=request.max_inflight,
        workers=workers,
        overheads=request.overheads,
        warmup_s=min(5.0, float(arrivals[-1]) / 10) if len(arrivals) else 0.0,
    )
    batch = np.random.default_rng(request.seed).random(len(arrivals)) < request.batch_share
    return simulate(config, arrivals, batch=batch)


def plan(request: PlanRequest) -> Plan:
    """Searches upwards from the pool that full batches would need, then bisects to the smallest fit."""
    arrivals = request.arrivals()
    if len(arrivals) == 0:
        raise ValueError("no arrivals: give a rate above 0 or a non-empty trace")
    span = float(arrivals[-1] - arrivals[0]) or 1.0
    rate = len(arrivals) / span
    capacity = request.profile.capacity(request.max_batch)
    fits: dict[int, SimResult] = {}

    def ok(workers: int) -> bool:
        result = evaluate(request, workers, arrivals)
        if result.percentile_ms(99) <= request.slo_p99_s * 1000:
            fits[workers] = result
            return True
        return False

    low = max(1, math.ceil(rate / capacity)) if math.isfinite(capacity) else 1
    high = low
    while not ok(high):
        low = high + 1
        high = high * 2
        if high > MAX_SEARCH_WORKERS:
            result = evaluate(request, MAX_SEARCH_WORKERS, arrivals)
            return Plan(request, MAX_SEARCH_WORKERS, rate, result, meets_slo=False)
    while low < high:
        middle = (low + high) // 2
        if ok(middle):
            high = middle
        else:
            low = middle + 1
    return Plan(request, high, rate, fits[high], meets_slo=True)


def read_trace(path: Path) -> Floats:
    """One arrival time in seconds per line (any origin); blank lines and # comments are skipped."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return np.array([float(line) for line in lines if line], dtype=float)


def parser() -> argparse.ArgumentParser:
    defaults = Settings.from_env()
    p = argparse.ArgumentParser(
        prog="synapse plan",
        description=__doc__,
        epilog="`synapse plan cold-start --help`: the time from zero to a first result on AWS; "
        "`synapse plan batch --help`: how long a Batch API batch takes",
    )
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--rate", type=float, help="arrival rate, jobs per second (Poisson)")
    load.add_argument("--trace", type=Path, help="file of arrival times in seconds, one per line")
    p.add_argument("--profile", type=LatencyProfile.parse, default=LatencyProfile(100.0),
                   help="T(b) in ms: `100` (any batch) or `20+0.5b`; default 100")  # fmt: skip
    p.add_argument("--max-batch", type=int, default=100)
    p.add_argument("--slo-ms", type=float, action="append", help="P99 SLO in ms; repeat to size several")
    p.add_argument("--gpu-price", type=float, default=defaults.gpu_price_per_hour, help="$ per GPU-hour")
    p.add_argument("--manager-price", type=float, default=MANAGER_PRICE_PER_HOUR, help="$ per manager-hour")
    p.add_argument("--manager-cpu-ms", type=float, default=MANAGER_CPU_S_PER_JOB * 1000,
                   help="manager CPU per job, ms (`synapse bench manager` measures it)")  # fmt: skip
    p.add_argument("--max-wait-ms", type=float, default=defaults.max_wait_ms, help="batching window")
    p.add_argument("--max-inflight", type=int, default=defaults.max_inflight_batches)
    p.add_argument(
        "--overheads-ms", default="1,1,1", help="read,send,reply ms per batch (`synapse bench calibrate`)"
    )
    p.add_argument("--duration", type=float, default=60.0, help="simulated seconds of a --rate run")
    p.add_argument("--batch-share", type=float, default=0.0,
                   help="share of jobs sent as batch priority, 0 to 1; the SLO is the others'")  # fmt: skip
    return p


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    read, send, reply = (float(x) / 1000 for x in args.overheads_ms.split(","))
    base = PlanRequest(
        profile=args.profile,
        max_batch=args.max_batch,
        slo_p99_s=0.0,
        rate=args.rate or 0.0,
        trace=read_trace(args.trace) if args.trace else None,
        gpu_price_per_hour=args.gpu_price,
        manager_price_per_hour=args.manager_price,
        manager_cpu_s_per_job=args.manager_cpu_ms / 1000,
        max_wait_s=args.max_wait_ms / 1000,
        max_inflight=args.max_inflight,
        overheads=Overheads(read, send, reply),
        duration_s=args.duration,
        batch_share=args.batch_share,
    )
    for slo_ms in args.slo_ms or [250.0]:
        print(f"\n## P99 SLO {slo_ms:g} ms\n")
        print(plan(replace(base, slo_p99_s=slo_ms / 1000)).table())
