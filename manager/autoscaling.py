"""The autoscaling policy: pure code that turns a snapshot of the load into a desired worker count.

- From zero: the first job for an empty pool asks for a worker at once, or for as many as the
  backlog needs when the throughput is known from earlier (a burst after scale-to-zero).
  A wake counts as such a job: a `/v1` call that found no READY worker and answered 503 instead
  of queueing (`frontdoor/capacity.py`); it keeps the pool up as a job seen at its time would.
- Up: when the backlog, drained at the measured per-worker throughput, would wait longer than the
  latency budget, ask for enough workers to drain it within the budget.
- Generative models: their sequences, waiting plus running, against the per-worker budget of
  sequences (`max_num_seqs`), ask for that many workers, at most `max_engine_workers`.
- Down: slowly, one worker per cool-down, while the pool is mostly idle; to the minimum (zero by
  default) once no job has been seen for `scale_to_zero_after_s`.
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
    woken_at: when a `/v1` call last found no READY worker (on the clock of `now`), or None.
    """

    now: float
    backlog: int
    running: int
    throughput: float
    busy_ratio: float
    last_job_at: float | None
    engine_workers: int = 0
    woken_at: float | None = None


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
        if load.backlog > 0 and load.throughput > 0:
            per_worker = load.throughput * limits.latency_budget_s  # jobs one worker drains within budget
            needed = math.ceil(load.backlog / per_worker)
            if needed > desired:
                return ScaleDecision(needed, f"backlog {load.backlog} needs {needed} workers within budget")
        # A wake is demand for as long as a job seen at its time would hold the pool: never longer.
        seen = [t for t in (load.last_job_at, load.woken_at) if t is not None]
        idle_for = load.now - max(seen) if seen else math.inf
        woken = load.woken_at is not None and load.now - load.woken_at < limits.scale_to_zero_after_s
        if (load.backlog > 0 or woken) and desired == 0:
            why = "jobs waiting" if load.backlog > 0 else "a /v1 call woke the pool"
            return ScaleDecision(max(1, limits.min_workers), f"{why} and no workers: scale from zero")
        if load.backlog == 0 and engines == 0 and idle_for >= limits.scale_to_zero_after_s:
            return ScaleDecision(limits.min_workers, f"no jobs for {idle_for:.0f} s")
        cooled = load.now - self._last_change_at >= limits.scale_down_cooldown_s
        if (
            cooled
            and load.backlog == 0
            and load.busy_ratio < IDLE_BUSY_RATIO
            and desired > max(1, limits.min_workers, engines)
        ):
            return ScaleDecision(desired - 1, f"busy {load.busy_ratio:.0%}: one fewer worker")
        return ScaleDecision(desired, "steady")
