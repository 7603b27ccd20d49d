"""The autoscaling policy: pure code that turns a snapshot of the load into a desired worker count.

- From zero: the first job for an empty pool asks for a worker at once, or for as many as the
  backlog needs when the throughput is known from earlier (a burst after scale-to-zero).
  A wake counts as such a job: a `/v1` call that found no READY worker and answered 503 instead
  of queueing (`frontdoor/capacity.py`); it keeps the pool up as a job seen at its time would.
- Up: when the backlog, drained at the measured per-worker throughput, would wait longer than the
  latency budget, ask for enough workers to drain it within the budget.
- Batch jobs (contract.jobs.Priority.BATCH) never ask for the latency budget: they ask for the workers
  that finish every one of them, at the measured throughput, by the earliest of their deadlines less
  `batch_margin_s` (a new worker's start), and fill the capacity interactive jobs leave meanwhile.
  The pool is the larger of the two asks; batch jobs alone still start an empty pool.
- Generative models: their sequences, waiting plus running, against the per-worker budget of
  sequences (`max_num_seqs`), ask for that many workers, at most `max_engine_workers`.
- Down: slowly, one worker per cool-down, while the pool is mostly idle, never below what the batch
  jobs ask for; to the minimum (zero by default) once no job has been seen for `scale_to_zero_after_s`.
The manager's loop and the capacity simulator drive the same object, with a real and a virtual clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

IDLE_BUSY_RATIO = 0.5


@dataclass(frozen=True, slots=True)
class ScalingLimits:
    min_workers: int = 0
    max_workers: int = 4
    latency_budget_s: float = 0.150
    scale_to_zero_after_s: float = 300.0
    scale_down_cooldown_s: float = 60.0
    max_engine_workers: int | None = None  # workers generative demand may ask for; None: max_workers
    batch_margin_s: float = 60.0  # a new worker's time to serve: batch work must fit in what is left

    def __post_init__(self) -> None:
        if not 0 <= self.min_workers <= self.max_workers:
            raise ValueError(
                f"need 0 <= min_workers <= max_workers, got {self.min_workers}, {self.max_workers}"
            )
        if self.latency_budget_s <= 0:
            raise ValueError(f"latency_budget_s must be > 0, got {self.latency_budget_s}")


@dataclass(frozen=True, slots=True)
class LoadSnapshot:
    """What the pool looks like now.

    backlog: jobs waiting that no worker has started (not the ones running);
    running: workers that are up; throughput: jobs per second one busy worker completes, the last
    measured even while the pool is empty (0: never measured);
    busy_ratio: share of wall time the running workers spent executing batches, lately;
    last_job_at: when a job was last seen, or None if never;
    engine_workers: workers the generative models' sequences (waiting and running) fill at their
    per-worker budget, rounded up (their jobs are not in backlog);
    woken_at: when a `/v1` call last found no READY worker (on the clock of `now`), or None;
    batch_backlog: batch jobs not yet ended, running ones included (not in backlog);
    batch_due_s: seconds from now to the earliest deadline among them, or None.
    """

    now: float
    backlog: int
    running: int
    throughput: float
    busy_ratio: float
    last_job_at: float | None
    engine_workers: int = 0
    woken_at: float | None = None
    batch_backlog: int = 0
    batch_due_s: float | None = None


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    desired: int
    reason: str


class Autoscaler:
    """Remembers only when it last changed its mind, for the cool-down."""

    def __init__(self, limits: ScalingLimits) -> None:
        self.limits = limits
        self._last_change_at = -math.inf

    def decide(self, load: LoadSnapshot, desired: int) -> ScaleDecision:
        decision = self._decide(load, desired)
        bounded = max(self.limits.min_workers, min(self.limits.max_workers, decision.desired))
        if bounded != desired:
            self._last_change_at = load.now
        return ScaleDecision(
            bounded, decision.reason if bounded == decision.desired else f"{decision.reason} (bounded)"
        )

    def _decide(self, load: LoadSnapshot, desired: int) -> ScaleDecision:
        limits = self.limits
        engines = min(load.engine_workers, limits.max_engine_workers or limits.max_workers)
        if engines > desired:
            return ScaleDecision(engines, f"generative sequences fill {engines} workers")
        interactive, batch = self._interactive_need(load), self._batch_need(load)
        need = max(interactive, batch)
        if need > desired:
            why = (
                f"backlog {load.backlog} needs {need} workers within budget"
                if interactive >= batch
                else f"batch backlog {load.batch_backlog} needs {need} workers by its deadline"
            )
            return ScaleDecision(need, why)
        # A wake is demand for as long as a job seen at its time would hold the pool: never longer.
        seen = [t for t in (load.last_job_at, load.woken_at) if t is not None]
        idle_for = load.now - max(seen) if seen else math.inf
        woken = load.woken_at is not None and load.now - load.woken_at < limits.scale_to_zero_after_s
        waiting = load.backlog > 0 or load.batch_backlog > 0
        if (waiting or woken) and desired == 0:
            why = "jobs waiting" if waiting else "a /v1 call woke the pool"
            return ScaleDecision(max(1, limits.min_workers), f"{why} and no workers: scale from zero")
        if not waiting and engines == 0 and idle_for >= limits.scale_to_zero_after_s:
            return ScaleDecision(limits.min_workers, f"no jobs for {idle_for:.0f} s")
        cooled = load.now - self._last_change_at >= limits.scale_down_cooldown_s
        if (
            cooled
            and load.backlog == 0
            and load.busy_ratio < IDLE_BUSY_RATIO
            and desired > max(1, limits.min_workers, engines, batch)
        ):
            return ScaleDecision(desired - 1, f"busy {load.busy_ratio:.0%}: one fewer worker")
        return ScaleDecision(desired, "steady")

    def _interactive_need(self, load: LoadSnapshot) -> int:
        """Workers that drain the interactive backlog within the latency budget (0: unknown or none)."""
        if load.backlog <= 0 or load.throughput <= 0:
            return 0
        return math.ceil(load.backlog / (load.throughput * self.limits.latency_budget_s))

    def _batch_need(self, load: LoadSnapshot) -> int:
        """Workers that finish every batch job by the earliest deadline, less a new worker's start.

        A deadline inside the margin asks for nothing: a worker started now would serve after it, and the
        whole backlog timed against one job's short deadline would ask for every worker allowed. Such
        jobs are promoted to interactive (`batching.promoted`) long before, and the latency rule sees them."""
        due = load.batch_due_s
        margin = self.limits.batch_margin_s
        if load.batch_backlog <= 0 or load.throughput <= 0 or due is None or due <= margin:
            return 0
        return math.ceil(load.batch_backlog / (load.throughput * (due - margin)))
