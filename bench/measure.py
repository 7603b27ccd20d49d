"""Figures of one run, from the client's own timestamps and the manager's job timings in Redis.

Nothing here reads a setting to produce a figure: batch sizes, worker busy time and cost all come
from what the jobs recorded (started_ms, completed_ms, batch_size, worker) and what the clock saw.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import redis

from bench.loadgen import GAVE_UP, Run
from contract.keys import job_key
from contract.prices import Prices
from planner.simulator import Floats, Overheads, SimResult

CHUNK = 2000
FIELDS = ("created_ms", "started_ms", "completed_ms", "batch_size", "worker", "status")
COST_FORMULA = (
    "cost per 1,000 = 1,000 x (worker-seconds x GPU $/h + manager-seconds x manager $/h) / 3,600 "
    "/ completed jobs; worker-seconds count every running worker, busy or idle, over the run"
)
NAIVE_FORMULA = (
    "naive cost per 1,000 = 1,000 x (GPU-seconds per request x (1 + cold start / run length)) x GPU $/h "
    "/ 3,600: each request is one invocation billed for the GPU time Triton measured for it; each of "
    "the rate x T(1) GPUs the load keeps busy (Little's law) starts cold once and stays warm for the run"
)


def front_door_note() -> str:
    """What these GPU-and-manager figures leave out, priced: the local run has no API Gateway or Lambda
    bill to measure, so the note gives the least each job adds on AWS (manager/cost.py prices it live)."""
    prices = Prices()
    synapse = 1000 * (prices.api_gateway(2) + prices.lambdas(2, 0))
    naive = 1000 * (prices.api_gateway(1) + prices.lambdas(1, 0))
    return (
        "These cost figures leave out what AWS bills per request. Through API Gateway (REST, "
        f"${prices.api_gateway_per_million_requests:.2f} per million) and the front-door Lambda, a job costs "
        f"Synapse at least a submit and one read: ${synapse:.5f} per 1,000 before the front door's "
        f"duration, and every further poll ${synapse / 2:.5f}; one invocation per request costs "
        f"${naive:.5f} per 1,000 before duration. On AWS the manager's ledger adds those parts, the "
        "Lambda time, the cache and the idle resources to both sides (manager/cost.py, the SLO "
        "dashboard's cost panels)"
    )


@dataclass(frozen=True, slots=True)
class JobTiming:
    created_ms: int
    started_ms: int
    completed_ms: int
    batch_size: int
    worker: str
    status: str

    @property
    def total_ms(self) -> int:
        return self.completed_ms - self.created_ms


def read_jobs(client: redis.Redis, ids: Sequence[str]) -> list[JobTiming | None]:
    """The job hashes, in order; None for a job that is not final (a lost job, if the run is over)."""
    out: list[JobTiming | None] = []
    for start in range(0, len(ids), CHUNK):
        pipe = client.pipeline(transaction=False)
        for job_id in ids[start : start + CHUNK]:
            pipe.hmget(job_key(job_id), list(FIELDS))
        for row in pipe.execute():
            created, started, completed, size, worker, status = row
            if status not in ("COMPLETED", "FAILED") or completed is None:
                out.append(None)
                continue
            timing = JobTiming(
                int(created), int(started or completed), int(completed), int(size or 0), worker or "", status
            )
            out.append(timing)
    return out


def batches(jobs: Iterable[JobTiming]) -> dict[tuple[str, int, int], int]:
    """Distinct batches, keyed by (worker, started_ms, completed_ms), with their sizes."""
    found: dict[tuple[str, int, int], int] = {}
    for job in jobs:
        if job.status == "COMPLETED" and job.batch_size:
            found[(job.worker, job.started_ms, job.completed_ms)] = job.batch_size
    return found


def busy_ratio(jobs: Sequence[JobTiming], start_ms: float, end_ms: float, workers: int) -> float:
    """Time each worker had a batch in flight (the union of its batches' spans) inside the window,
    over the window times the workers: the busy share the manager sees."""
    spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for worker, started, completed in batches(jobs):
        spans[worker].append((started, completed))
    busy = 0.0
    for intervals in spans.values():
        edge = -math.inf
        for s, e in sorted(intervals):
            lo, hi = max(s, edge, start_ms), min(e, end_ms)
            if hi > lo:
                busy += hi - lo
            edge = max(edge, e)
    window = (end_ms - start_ms) * max(1, workers)
    return busy / window if window > 0 else 0.0


LAG_NOTE_MS = 10.0


def send_lag_ms(run: Run) -> float:
    """P99 of how late the load generator sent its requests against their schedule."""
    return pct([(s.sent - s.intended) * 1000 for s in run.samples if s.sent > 0], 99)


def lag_note(run: Run) -> list[str]:
    """A note when the load generator itself fell behind its schedule: its figures then include that."""
    p99 = send_lag_ms(run)
    if math.isnan(p99) or p99 <= LAG_NOTE_MS:
        return []
    return [f"the load generator sent late (P99 {p99:,.0f} ms behind schedule: it was short of CPU); "
            "latencies count from the scheduled time, so they include it"]  # fmt: skip


def pct(values: Floats | Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else math.nan


@dataclass
class Figures:
    """One row of the report."""

    name: str
    offered_rate: float
    sent: int
    completed: int
    failed: int
    lost: int
    duration_s: float
    latencies_ms: Floats  # client: scheduled send -> result in hand
    server_ms: Floats = field(default_factory=lambda: np.array([], dtype=float))  # job timings totalMs
    batch_sizes: list[int] = field(default_factory=list)
    busy: float | None = None
    worker_seconds: float = 0.0
    cost_per_1000: float | None = None
    notes: list[str] = field(default_factory=list)
    send_lag_ms: float = 0.0  # P99 of the load generator's lateness: above LAG_NOTE_MS, latencies are its too

    @property
    def throughput(self) -> float:
        return self.completed / self.duration_s if self.duration_s > 0 else 0.0

    def p(self, q: float) -> float:
        return pct(self.latencies_ms, q)

    def batch_summary(self) -> str:
        if not self.batch_sizes:
            return "—"
        sizes = np.asarray(self.batch_sizes)
        p50, p90 = np.percentile(sizes, 50), np.percentile(sizes, 90)
        return f"mean {sizes.mean():.1f}, P50 {p50:.0f}, P90 {p90:.0f}, max {sizes.max()}"


def synapse_figures(
    name: str, run: Run, jobs: list[JobTiming | None], *, workers: int, gpu_price: float, manager_price: float
) -> Figures:
    """A Synapse run: client latencies, plus the manager's timings for batches, busy time and cost."""
    accepted = [(s, j) for s, j in zip(run.samples, jobs, strict=True) if s.job_id]
    final = [j for _, j in accepted if j is not None]
    by_id = {j_id: j for j_id, j in ((s.job_id, j) for s, j in accepted) if j is not None}
    span_s = _span(run, final)
    created = [j.created_ms for j in final]
    window = (min(created), max(created)) if created else (0, 0)
    completed = sum(1 for j in final if j.status == "COMPLETED")
    worker_seconds = workers * span_s
    cost = (worker_seconds * gpu_price + span_s * manager_price) / 3600
    return Figures(
        name=name,
        offered_rate=run.offered_rate,
        sent=len(run.samples),
        completed=completed,
        failed=sum(1 for j in final if j.status == "FAILED"),
        lost=len(accepted) - len(final),
        duration_s=span_s,
        latencies_ms=np.array(_client_latencies(run, by_id), dtype=float),
        server_ms=np.array([j.total_ms for j in final if j.status == "COMPLETED"], dtype=float),
        batch_sizes=list(batches(final).values()),
        busy=busy_ratio(final, window[0], window[1], workers),
        worker_seconds=worker_seconds,
        cost_per_1000=1000 * cost / completed if completed else None,
        notes=_notes(run, len(accepted)),
        send_lag_ms=send_lag_ms(run),
    )


def _notes(run: Run, accepted: int) -> list[str]:
    gave_up = sum(1 for s in run.samples if s.error == GAVE_UP and not s.job_id)
    rejected = len(run.samples) - accepted - gave_up
    notes = [f"{rejected} rejected at submission"] if rejected else []
    if gave_up:
        notes.append(f"{gave_up} never submitted: still waiting for a connection when the run ended")
    return notes + lag_note(run)


@dataclass(frozen=True)
class Trial:
    """One short run at a load level and the simulator on its arrival times."""

    measured: Figures
    simulated: SimResult

    def errors(self) -> tuple[float, float]:
        """Relative error of the simulated P99 and busy share against the measured ones."""
        measured_p99 = pct(self.measured.server_ms, 99)
        p99 = abs(self.simulated.percentile_ms(99) - measured_p99) / measured_p99
        measured_busy = self.measured.busy or 0.0
        busy = abs(self.simulated.busy_ratio - measured_busy) / max(1e-9, measured_busy)
        return p99, busy


@dataclass(frozen=True)
class SweepPoint:
    """A load level, run as several trials. On a small shared machine one stall of a few tens of ms
    decides the P99 of a short run (it delays a whole batch, about 1 % of the jobs), so one trial is a
    coin toss; the median over the trials is what a level's error is judged on."""

    rate: float
    trials: tuple[Trial, ...]
    overheads: Overheads

    def __post_init__(self) -> None:
        if not self.trials:
            raise ValueError("a sweep point needs at least one trial")

    @property
    def typical(self) -> Trial:
        """The trial with the median P99 error: what one run at this load looks like."""
        ranked = sorted(self.trials, key=lambda trial: trial.errors()[0])
        return ranked[len(ranked) // 2]

    def errors(self) -> tuple[float, float]:
        """The median over the trials of the P99 and busy-share errors."""
        p99, busy = zip(*(trial.errors() for trial in self.trials), strict=True)
        return float(np.median(p99)), float(np.median(busy))


def _client_latencies(run: Run, jobs: dict[str, JobTiming]) -> list[float]:
    """Scheduled send -> result: the client's own clock where it waited for the result (HTTP); where it
    did not (direct), the manager's completion time against the wall-clock moment the request was due."""
    out = []
    for sample in run.samples:
        job = jobs.get(sample.job_id)
        if job is None or job.status != "COMPLETED":
            continue
        if sample.done > sample.sent and run.target != "direct":
            out.append(sample.latency_s * 1000)
        else:
            out.append(job.completed_ms - (run.started_wall + sample.intended) * 1000)
    return out


def _span(run: Run, jobs: Sequence[JobTiming]) -> float:
    """From the first scheduled request to the last result: the time the pool was held for the run."""
    last = max((j.completed_ms for j in jobs), default=0) / 1000 - run.started_wall
    return max(last, max((s.done for s in run.samples), default=0.0), run.duration_s)
