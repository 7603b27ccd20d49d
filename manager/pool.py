"""The worker-pool rules: which worker gets the next batch, when a busy one should free up, how busy
each one is, and how many jobs a busy second completes.

Pure: every call takes the time (monotonic seconds) as an argument and does no I/O. The manager's
`Fleet` and the capacity simulator (`planner/simulator.py`) drive the same object, the one with the
real clock, the other with a virtual one, so what is simulated is what runs.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from manager import prefix_routing
from manager.busy import BusyClock

BATCH_TIME_WEIGHT = 0.2  # a new measurement moves the batch-time estimate by a fifth


@dataclass(slots=True)
class _Load:
    expected: deque[float | None] = field(default_factory=deque)  # per batch in flight, oldest first
    expected_free_at: float = 0.0  # when its batches in flight should be done; 0: unknown or idle
    jobs_done: int = 0
    last_release_at: float = -math.inf  # when its last batch came back

    @property
    def inflight(self) -> int:
        return len(self.expected)


@dataclass(slots=True)
class BatchTimer:
    """How long one batch of a model takes on its worker (a moving average of `WorkerPool.release`'s
    own times), for expecting when a busy worker frees up."""

    seconds: float | None = None

    def observe(self, seconds: float) -> None:
        previous = self.seconds
        self.seconds = seconds if previous is None else previous + BATCH_TIME_WEIGHT * (seconds - previous)


class WorkerPool:
    """Batches in flight per worker, at most `max_inflight` each, and the busy clock they drive."""

    def __init__(self, max_inflight: int, busy: BusyClock) -> None:
        if max_inflight < 1:
            raise ValueError(f"max_inflight must be >= 1, got {max_inflight}")
        self.max_inflight = max_inflight
        self.busy = busy
        self._loads: dict[str, _Load] = {}
        self._last_throughput = 0.0

    def inflight(self, worker: str) -> int:
        load = self._loads.get(worker)
        return 0 if load is None else load.inflight

    def pick(self, candidates: Iterable[str]) -> str | None:
        """The candidate with the fewest batches in flight that has room; the first one among equals."""
        best: str | None = None
        best_inflight = self.max_inflight
        for worker in candidates:
            inflight = self.inflight(worker)
            if inflight < best_inflight:
                best, best_inflight = worker, inflight
                if inflight == 0:
                    break
        return best

    def has_idle(self, candidates: Iterable[str]) -> bool:
        return any(self.inflight(worker) == 0 for worker in candidates)

    def busy_until(self, candidates: Iterable[str]) -> float | None:
        """When the first busy candidate with room should finish; None if there is none or it is unknown."""
        times = [
            load.expected_free_at
            for worker in candidates
            if (load := self._loads.get(worker)) is not None
            and 0 < load.inflight < self.max_inflight
            and load.expected_free_at
        ]
        return min(times, default=None)

    def acquire(self, worker: str, now: float, expected_s: float | None) -> None:
        """One more batch on the worker, expected to take expected_s once it starts (None: unknown).

        Batches on a worker run one after the other, so a second one is expected after the first.
        """
        load = self._loads.setdefault(worker, _Load())
        if expected_s is None:
            load.expected_free_at = 0.0
        elif load.inflight == 0 or load.expected_free_at:
            load.expected_free_at = max(now, load.expected_free_at) + expected_s
        load.expected.append(expected_s)
        self.busy.begin(worker, now)

    def release(self, worker: str, now: float, sent_at: float, jobs_done: int = 0) -> float:
        """A batch sent at sent_at came back (jobs_done of its jobs ran) or failed; returns its own time
        on the worker.

        A worker runs its batches one after another, so a batch sent while another was in flight
        starts when that one comes back: its own time counts from then. Timing only batches that
        were alone would, under sustained load, almost never measure one.
        """
        load = self._loads.get(worker)
        if load is None or load.inflight == 0:
            return max(0.0, now - sent_at)
        own = max(0.0, now - max(sent_at, load.last_release_at))
        load.last_release_at = now
        load.expected.popleft()
        load.jobs_done += jobs_done
        # The next batch starts now: expect the rest from here, so estimates never drift from the
        # worker's real pace however long it stays busy.
        remaining = list(load.expected)
        known = bool(remaining) and all(e is not None for e in remaining)
        load.expected_free_at = now + sum(e for e in remaining if e is not None) if known else 0.0
        self.busy.end(worker, now)
        return own

    def track(self, workers: Iterable[str], now: float) -> None:
        """Follows the pool: gone workers are forgotten once nothing runs on them (see BusyClock.track)."""
        present = set(workers)
        for worker in [w for w, load in self._loads.items() if w not in present and load.inflight == 0]:
            del self._loads[worker]
        self.busy.track(present, now)

    def busy_seconds(self, now: float) -> float:
        """Busy seconds of the workers known now, summed."""
        return sum(self.busy.busy_seconds(worker, now) for worker in self._loads)

    def throughput(self, now: float) -> float:
        """Jobs per busy second of one worker, as measured on this pool; 0 before any batch ever ran.

        The last measurement outlives the workers it came from, so that a burst after scale-to-zero
        can ask for the workers it needs at once instead of one cold start after another.
        """
        busy = self.busy_seconds(now)
        done = sum(load.jobs_done for load in self._loads.values())
        if busy > 0 and done > 0:
            self._last_throughput = done / busy
        return self._last_throughput


@dataclass(frozen=True, slots=True)
class RetryPlan:
    """What happens to the jobs of a failed batch: `give_up` and `retry` hold their positions."""

    give_up: tuple[int, ...]
    retry: tuple[int, ...]
    alone: bool  # the retried jobs run in batches of one each


@dataclass(frozen=True, slots=True)
class RetryRule:
    """A worker fault sends the batch elsewhere as it was; a model error sends each job alone, so
    that a poison job fails by itself. A job that has had `max_attempts` attempts is given up."""

    max_attempts: int

    def after_failure(self, attempts: Iterable[int], *, worker_fault: bool) -> RetryPlan:
        attempts = list(attempts)
        give_up = tuple(i for i, attempt in enumerate(attempts) if attempt >= self.max_attempts)
        retry = tuple(i for i, attempt in enumerate(attempts) if attempt < self.max_attempts)
        return RetryPlan(give_up=give_up, retry=retry, alone=not worker_fault and len(attempts) > 1)


class SequenceSlots:
    """Sequences of generative models running per worker, each worker holding at most a model's budget.

    The router of a continuous-batching engine: a job goes as soon as it arrives to a worker that has
    room, the one likeliest to hold its prompt's prefix within a bound of the least loaded; the rest wait
    in the queue. Pure, like `WorkerPool`, so the planner can drive it too.
    """

    def __init__(self) -> None:
        self._running: dict[tuple[str, str], int] = {}
        self._tokens: dict[tuple[str, str], int] = {}  # KV-cache tokens the running sequences may take

    def running(self, worker: str, model: str) -> int:
        return self._running.get((worker, model), 0)

    def tokens(self, worker: str, model: str) -> int:
        return self._tokens.get((worker, model), 0)

    def on_worker(self, worker: str) -> int:
        """Sequences of every model running on the worker."""
        return sum(n for (w, _), n in self._running.items() if w == worker)

    def pick(
        self, candidates: Iterable[str], model: str, budget: int, key: bytes | None = None, *,
        need: int = 0, kv_tokens: int | None = None,
    ) -> str | None:  # fmt: skip
        """The candidate for a job whose prompt has this prefix key (manager/prefix_routing.py), among
        those under budget with room in their KV cache (`kv_tokens`) for the `need` tokens of the job,
        or with nothing of the model running; with no key, the one with the fewest sequences running.

        Past its cache, an engine evicts and recomputes running sequences: on the CPU, 16 uncached
        1,500-token prompts on a worker of 10,240 cached tokens made no first token for minutes and
        their jobs failed as hung. They wait in the queue instead, where the autoscaler sees them."""

        def fits(worker: str) -> bool:
            used = self.tokens(worker, model)
            return kv_tokens is None or not self.running(worker, model) or used + need <= kv_tokens

        return prefix_routing.choose(
            candidates, lambda worker: self.running(worker, model), budget, key, fits
        )

    def acquire(self, worker: str, model: str, tokens: int = 0) -> None:
        self._running[(worker, model)] = self.running(worker, model) + 1
        self._tokens[(worker, model)] = self.tokens(worker, model) + tokens

    def release(self, worker: str, model: str, tokens: int = 0) -> None:
        left = self.running(worker, model) - 1
        if left > 0:
            self._running[(worker, model)] = left
            self._tokens[(worker, model)] = self.tokens(worker, model) - tokens
        else:
            self._running.pop((worker, model), None)
            self._tokens.pop((worker, model), None)

    def total(self, model: str) -> int:
        return sum(n for (_, m), n in self._running.items() if m == model)
