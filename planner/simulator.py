"""A discrete-event simulator of Synapse: the manager's own rule objects on a virtual clock, in front
of workers modelled as servers that take T(b) per batch. It drives those rules, as the dispatcher and
the autoscaler loop do, rather than re-implement them, so what is simulated is what runs:
- `BatchPolicy`, asked whenever something changes (a read returns, a batch returns, a worker joins),
  its window counting from when the manager read each job, as the dispatcher's does;
- `WorkerPool`: the READY worker with the fewest batches in flight gets the next one, and when a busy
  one should free up is the manager's estimate (`BatchTimer`, fed by each batch's own time on its
  worker), not what the simulator knows; its busy seconds and throughput feed the autoscaler;
- `RetryRule`: a batch holding a poison job fails whole; its jobs go back to the front of the queue,
  each alone, until the culprit is out of attempts;
- optionally `Autoscaler`, ticking once a second, with a worker start-up time.
Arrivals may be marked batch priority: they wait apart, top up the batches interactive jobs close or
go alone to an idle worker, and go first once half their time to their deadline (`batch_timeout_s`)
has passed, as `manager.queue.Waiting` holds them; figures are kept per priority.
What it adds is the world: workers that run their batches one at a time, in order (Triton's queue),
overheads measured on the real stack, and a reader whose one read returns, a round trip later, every
job submitted by then. Pending jobs of each priority are an index range of its sorted arrivals
(behind a small queue of retried or promoted ones); only batch completions, timers and worker starts
go through the event heap, so 20,000 jobs a second for a minute runs in seconds.
"""

from __future__ import annotations

import bisect
import heapq
import math
import re
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from manager.autoscaling import Autoscaler, LoadSnapshot, ScalingLimits
from manager.batching import BatchDecision, BatchPolicy, promoted
from manager.busy import BusyClock
from manager.pool import BatchTimer, RetryRule, WorkerPool

# Event kinds, in the order they are handled when they fall on the same instant.
_DONE, _READY, _WAKE, _TICK, _UPKEEP = 0, 1, 2, 3, 4
# The dispatcher's upkeep round: each one promotes the due batch jobs its batch buffer holds (a batch per
# READY worker), so promoted jobs go ahead of interactive ones at most that many at a time.
UPKEEP_S = 0.5
GIVE_UP_AFTER_S = 3600.0

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int_]
Bools = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class LatencyProfile:
    """T(b) = base + per_item * b, as gpu-sim's config states it."""

    base_ms: float
    per_item_ms: float = 0.0

    def seconds(self, batch: int) -> float:
        return (self.base_ms + self.per_item_ms * batch) / 1000.0

    def capacity(self, max_batch: int) -> float:
        """Jobs per second one worker completes with full batches back to back."""
        seconds = self.seconds(max_batch)
        return max_batch / seconds if seconds > 0 else math.inf

    def describe(self) -> str:
        return f"{self.base_ms:g} + {self.per_item_ms:g}·b ms" if self.per_item_ms else f"{self.base_ms:g} ms"

    @classmethod
    def parse(cls, text: str) -> LatencyProfile:
        """`100` (ms per batch, any size) or `20+0.5b` (base + per-item ms)."""
        match = re.fullmatch(r"\s*([\d.]+)\s*(?:\+\s*([\d.]+)\s*\*?\s*b)?\s*", text)
        if match is None:
            raise ValueError(f"latency profile {text!r}: write `100` or `20+0.5b` (milliseconds)")
        return cls(float(match.group(1)), float(match.group(2) or 0.0))


@dataclass(frozen=True, slots=True)
class Overheads:
    """Fixed costs around every batch, seconds; measured once on the real stack (`bench.calibrate`)."""

    read_s: float = 0.0  # a job is submitted -> the manager holds it
    send_s: float = 0.0  # a batch is cut -> its worker starts it
    reply_s: float = 0.0  # its worker finishes -> the manager holds the outcomes
    exec_s: float = 0.0  # a batch's time on the worker beyond T(b): the worker's own per-batch cost


@dataclass(frozen=True, slots=True)
class SimConfig:
    profile: LatencyProfile
    max_batch: int
    max_wait_s: float = 0.020
    max_inflight: int = 2
    workers: int = 1
    overheads: Overheads = Overheads()
    scaling: ScalingLimits | None = None  # None: a fixed pool of `workers`
    startup_s: float = 10.0  # a new worker's time to READY, when the autoscaler asks for one
    tick_s: float = 1.0
    warmup_s: float = 0.0  # jobs created earlier are left out of the figures
    # What the manager already knows of a batch's time on a worker when the run starts (a manager that
    # has run the model before); None: it has yet to measure one, as after its own start.
    batch_time_s: float | None = None
    poison_rate: float = 0.0  # share of jobs whose prompt makes the model reject their whole batch
    max_attempts: int = 3  # as the manager's setting: attempts before a job is given up
    poison_seed: int = 1
    batch_timeout_s: float = 900.0  # a batch-priority job's deadline, from its arrival (the API's default)

    def __post_init__(self) -> None:
        if self.max_inflight < 1 or self.max_batch < 1 or self.max_attempts < 1:
            raise ValueError("max_inflight, max_batch and max_attempts must be >= 1")
        if self.batch_timeout_s <= 0:
            raise ValueError(f"batch_timeout_s must be > 0, got {self.batch_timeout_s}")
        if self.scaling is None and self.workers < 1:
            raise ValueError("a fixed pool needs at least one worker")


@dataclass(slots=True)
class _Worker:
    index: int
    requested_at: float
    ready_at: float = math.inf
    retired_at: float = math.inf
    free_at: float = 0.0  # when the worker finishes the last batch queued on it
    busy_since: float = 0.0
    draining: bool = False
    intervals: list[tuple[float, float]] = field(default_factory=list)  # time with a batch in flight

    @property
    def id(self) -> str:
        return str(self.index)


@dataclass(slots=True)
class Batch:
    """One batch as it ran: the jobs it led with from the front of the queues, then interactive jobs
    first..last and batch jobs fill_first..fill_last, positions in each priority's arrivals (with no
    batch jobs, positions in the arrivals)."""

    worker: int
    cut_at: float
    first: int
    last: int
    retried: tuple[int, ...] = ()  # jobs (arrival indices) that failed before, or batch jobs promoted
    fill_first: int = 0
    fill_last: int = 0
    size: int = 0
    done_at: float = 0.0
    failed: bool = False  # it held a poison job: the model rejected it as a whole


@dataclass(frozen=True, slots=True)
class SimResult:
    """What a run produced; figures cover jobs created at or after the warm-up."""

    latencies_s: Floats  # per completed interactive job, in arrival order: created -> outcome held
    batch_sizes: Ints
    busy_ratio: float  # union of in-flight time per worker / (window * workers up), as measured
    worker_seconds: float  # every worker from the moment it was asked for until it stopped
    window_s: float
    completed: int
    pool: list[tuple[float, int]]  # (time, workers READY) at every change
    horizon_s: float
    failed: int = 0  # jobs given up after max_attempts
    batch_latencies_s: Floats = field(default_factory=lambda: np.empty(0))  # the same for batch jobs

    def percentile_ms(self, q: float, *, batch: bool = False) -> float:
        """The interactive jobs' latency percentile (or the batch jobs')."""
        latencies = self.batch_latencies_s if batch else self.latencies_s
        return float(np.percentile(latencies, q) * 1000) if len(latencies) else math.nan

    @property
    def throughput(self) -> float:
        return self.completed / self.window_s if self.window_s > 0 else 0.0


def poisson_arrivals(rate: float, duration_s: float, seed: int = 1) -> Floats:
    """Open-loop arrival times (seconds from 0) of a Poisson process at `rate` per second."""
    rng = np.random.default_rng(seed)
    expected = int(rate * duration_s * 1.2 + 100)
    times = np.cumsum(rng.exponential(1.0 / rate, size=expected))
    while times[-1] < duration_s:  # rare: draw more
        more = times[-1] + np.cumsum(rng.exponential(1.0 / rate, size=expected))
        times = np.concatenate([times, more])
    result: Floats = times[times < duration_s]
    return result


class Simulation:
    """One run over a fixed set of arrival times, `batch` marking those of batch priority; `run()` once."""

    def __init__(self, config: SimConfig, arrivals: Floats, batch: Bools | None = None) -> None:
        self.cfg = config
        order = np.argsort(np.asarray(arrivals, dtype=float), kind="stable")
        self.created = np.asarray(arrivals, dtype=float)[order]
        self.created_list: list[float] = self.created.tolist()
        n = len(self.created)
        self.is_batch = np.zeros(n, dtype=bool) if batch is None else np.asarray(batch, dtype=bool)[order]
        # Each priority's jobs (arrival indices) in arrival order, and batch jobs among the first k arrivals.
        self._order = (np.flatnonzero(~self.is_batch), np.flatnonzero(self.is_batch))
        self._order_list: tuple[list[int], list[int]] = (self._order[0].tolist(), self._order[1].tolist())
        self._batch_upto: list[int] = [0, *np.cumsum(self.is_batch).tolist()]
        self.policy = BatchPolicy(max_batch_size=config.max_batch, max_wait_s=config.max_wait_s)
        self.autoscaler = Autoscaler(config.scaling) if config.scaling else None
        self.worker_pool = WorkerPool(config.max_inflight, BusyClock())
        self.batch_timer = BatchTimer(config.batch_time_s)
        self.retry_rule = RetryRule(config.max_attempts)
        self.completed_at = np.full(n, math.nan)
        self._received = np.full(n, math.nan)  # when the manager read each job: its batching window's clock
        self.failed = np.zeros(n, dtype=bool)
        self.batches: list[Batch] = []
        self.workers: list[_Worker] = []
        self.pool: list[tuple[float, int]] = [(0.0, 0)]
        # The jobs whose prompt makes the model reject their batch, and how many come before each job in
        # its priority's order.
        self.poison = np.random.default_rng(config.poison_seed).random(n) < config.poison_rate
        self._poison_upto = tuple([0, *np.cumsum(self.poison[o]).tolist()] for o in self._order)
        self._retry: deque[int] = deque()  # retried and promoted jobs, ahead of the interactive range
        self._batch_retry: deque[int] = deque()  # retried batch jobs, ahead of the batch range
        self._attempt: dict[int, int] = {}  # attempts so far of jobs that failed; 1 for the rest
        self._alone: set[int] = set()  # retried jobs marked to run alone (Delivery.alone)
        self._candidates: list[str] = []  # READY, non-draining workers, oldest first
        self._view: tuple[str | None, bool, float | None] | None = None  # pick, has_idle, busy_until
        self._events: list[tuple[float, int, int, Batch | None]] = []
        self._seq = 0
        self._head = [0, 0]  # first pending job of each priority's range
        self._seen = 0  # jobs visible to the manager
        self._settled = 0  # jobs with an outcome: completed or failed
        self._batch_settled = 0
        self._oldest_batch = 0  # position of the oldest batch job without an outcome
        self._busy_mark = (0.0, 0.0)
        self._last_job_at: float | None = None
        self._desired = 0
        self._last_wake = -1.0

    # -- events -------------------------------------------------------------------------------
    def _push(self, at: float, kind: int, batch: Batch | None = None) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, kind, self._seq, batch))

    def run(self, horizon_s: float = 0.0) -> SimResult:
        """Simulates until every job is done and, with autoscaling, until `horizon_s`."""
        if self.autoscaler is None:
            for _ in range(self.cfg.workers):
                self._add_worker(0.0, ready_at=0.0)
        else:
            self._push(0.0, _TICK)
        if self._order_list[1]:
            self._push(UPKEEP_S, _UPKEEP)
        events = self._events
        now = 0.0
        read_at, read_upto = self._next_read(0.0)
        while True:
            next_event = events[0][0] if events else math.inf
            if read_at == math.inf and (next_event == math.inf or self._finished(now, horizon_s)):
                break
            if read_at <= next_event:
                now = read_at
                self._received[self._seen : read_upto] = now
                self._seen = read_upto
                read_at, read_upto = self._next_read(now)
                if self._look()[0] is None:
                    continue  # the dispatcher needs a free slot: nothing happens before the next event
            else:
                now, kind, _, batch = heapq.heappop(events)
                self._handle(now, kind, batch)
            self._dispatch(now)
        return self._result(now)

    def _handle(self, now: float, kind: int, batch: Batch | None) -> None:
        if batch is not None:
            self._batch_done(now, batch)
        elif kind == _READY:
            self._record_pool(now)
        elif kind == _TICK:
            self._tick(now)
            self._push(now + self.cfg.tick_s, _TICK)
        elif kind == _UPKEEP:
            self._promote(now)
            if self._batch_settled < len(self._order_list[1]):
                self._push(now + UPKEEP_S, _UPKEEP)

    def _next_read(self, start: float) -> tuple[float, int]:
        """The manager's reader: a read started at `start` returns, one round trip later, every job
        created by then; with none waiting it blocks until the next one is created."""
        created = self.created_list
        if self._seen >= len(created):
            return math.inf, self._seen
        since = max(start, created[self._seen])
        return since + self.cfg.overheads.read_s, bisect.bisect_right(created, since, lo=self._seen)

    def _finished(self, now: float, horizon_s: float) -> bool:
        all_done = self._settled == len(self.created)
        if self.autoscaler is not None and now > horizon_s + GIVE_UP_AFTER_S:
            return True  # a pool that never serves (max_workers 0): stop rather than tick forever
        return all_done and (self.autoscaler is None or now >= horizon_s)

    # -- dispatching, as OneShotRunner.send does it --------------------------------
    def _look(self) -> tuple[str | None, bool, float | None]:
        """The pool's answers for the READY workers; they change only when the pool does."""
        if self._view is None:
            pool, candidates = self.worker_pool, self._candidates
            self._view = (pool.pick(candidates), pool.has_idle(candidates), pool.busy_until(candidates))
        return self._view

    def _batch_oldest_at(self) -> float | None:
        """When the manager read the batch job at the head of its queue (a retried one first)."""
        if self._batch_retry:
            return float(self._received[self._batch_retry[0]])
        head, batch = self._head[1], self._order_list[1]
        if head < self._batch_upto[self._seen]:
            return float(self._received[batch[head]])
        return None

    def _dispatch(self, now: float) -> None:
        received, head, batch_upto = self._received, self._head, self._batch_upto
        interactive = self._order_list[0]
        while True:
            seen_batch = batch_upto[self._seen]
            waiting = len(self._retry) + self._seen - seen_batch - head[0]
            batch_waiting = len(self._batch_retry) + seen_batch - head[1]
            if not waiting and not batch_waiting:
                return
            oldest = self._retry[0] if self._retry else interactive[head[0]] if waiting else None
            picked, idle, busy_until = self._look()
            decision = self.policy.decide(
                now=now,
                pending=waiting,
                oldest_at=None if oldest is None else float(received[oldest]),
                idle_worker=idle,
                free_slot=picked is not None,
                busy_until=busy_until,
                batch_pending=batch_waiting,
                batch_oldest_at=self._batch_oldest_at(),
            )
            if decision.size == 0 or picked is None:
                if decision.wake_at is not None and decision.wake_at != self._last_wake:
                    self._last_wake = decision.wake_at
                    self._push(decision.wake_at, _WAKE)
                return
            self._start_batch(now, self._cut(int(picked), now, decision))

    def _promote(self, now: float) -> None:
        """Of the oldest batch jobs, those the manager's batch buffer holds, the ones past half their time
        to the deadline go to the front of the interactive queue (`Waiting.promote`)."""
        head, batch, created = self._head, self._order_list[1], self.created_list
        seen, timeout = self._batch_upto[self._seen], self.cfg.batch_timeout_s
        last = min(seen, head[1] + self.cfg.max_batch * max(1, len(self._candidates)))
        while head[1] < last and promoted(created[batch[head[1]]], created[batch[head[1]]] + timeout, now):
            self._retry.append(batch[head[1]])
            head[1] += 1

    def _cut(self, worker: int, now: float, decision: BatchDecision) -> Batch:
        """The decision's jobs, as `Waiting.cut` takes them: a job marked alone goes by itself."""
        head, retry, batch_retry = self._head, self._retry, self._batch_retry
        lead = retry if decision.take else batch_retry
        if lead and lead[0] in self._alone:
            return Batch(worker, now, head[0], head[0], (lead.popleft(),), head[1], head[1])
        fill = 0 if decision.take and batch_retry and batch_retry[0] in self._alone else decision.fill
        retried = [retry.popleft() for _ in range(min(decision.take, len(retry)))]
        first, head[0] = head[0], head[0] + decision.take - len(retried)
        filled = [batch_retry.popleft() for _ in range(min(fill, len(batch_retry)))]
        fill_first, head[1] = head[1], head[1] + fill - len(filled)
        return Batch(worker, now, first, head[0], (*retried, *filled), fill_first, head[1])

    def _start_batch(self, now: float, batch: Batch) -> None:
        worker = self.workers[batch.worker]
        if self.worker_pool.inflight(worker.id) == 0:
            worker.busy_since = now
        self.worker_pool.acquire(worker.id, now, self.batch_timer.seconds)
        self._view = None
        upto, fill_upto = self._poison_upto
        batch.failed = (
            upto[batch.last] > upto[batch.first]
            or fill_upto[batch.fill_last] > fill_upto[batch.fill_first]
            or any(self.poison[j] for j in batch.retried)
        )
        batch.size = len(batch.retried) + batch.last - batch.first + batch.fill_last - batch.fill_first
        start = max(now + self.cfg.overheads.send_s, worker.free_at)
        worker.free_at = start + self.cfg.profile.seconds(batch.size) + self.cfg.overheads.exec_s
        batch.done_at = worker.free_at + self.cfg.overheads.reply_s
        self.batches.append(batch)
        self._push(batch.done_at, _DONE, batch)

    def _jobs(self, batch: Batch) -> list[int]:
        """The batch's jobs, as arrival indices."""
        interactive, queued = self._order_list
        return [
            *batch.retried,
            *interactive[batch.first : batch.last],
            *queued[batch.fill_first : batch.fill_last],
        ]

    def _batch_done(self, now: float, batch: Batch) -> None:
        """The outcome is held: as OneShotRunner._run_batch, release the worker and time the batch."""
        worker = self.workers[batch.worker]
        jobs_done = 0
        if batch.failed:
            self._after_failure(now, batch)
        else:
            jobs_done = batch.size
            interactive, queued = self._order
            self.completed_at[interactive[batch.first : batch.last]] = now
            self.completed_at[queued[batch.fill_first : batch.fill_last]] = now
            self.completed_at[list(batch.retried)] = now
            self._settle(
                jobs_done, batch.fill_last - batch.fill_first + int(self.is_batch[list(batch.retried)].sum())
            )
        own_s = self.worker_pool.release(worker.id, now, batch.cut_at, jobs_done=jobs_done)
        if jobs_done:
            self.batch_timer.observe(own_s)
        self._view = None
        if self.worker_pool.inflight(worker.id) == 0:
            worker.intervals.append((worker.busy_since, now))
            if worker.draining:
                worker.retired_at = now
                self._record_pool(now)

    def _after_failure(self, now: float, batch: Batch) -> None:
        """A model error, as Settler.after_failure handles it: jobs out of attempts fail, the
        rest go back to the front of the queue, each alone when the batch held more than one."""
        jobs = self._jobs(batch)
        plan = self.retry_rule.after_failure([self._attempt.get(job, 1) for job in jobs], worker_fault=False)
        given_up = [jobs[i] for i in plan.give_up]
        self.failed[given_up] = True
        self._settle(len(given_up), int(self.is_batch[given_up].sum()))
        again = [jobs[i] for i in plan.retry]
        self._attempt.update((job, self._attempt.get(job, 1) + 1) for job in again)
        if plan.alone:
            self._alone.update(again)
        first = [self._goes_first(j, now) for j in again]
        self._retry.extendleft(reversed([j for j, f in zip(again, first, strict=True) if f]))
        self._batch_retry.extendleft(reversed([j for j, f in zip(again, first, strict=True) if not f]))

    def _goes_first(self, job: int, now: float) -> bool:
        """Interactive, or a batch job promoted by now: a retry goes back to the interactive front."""
        created = self.created_list[job]
        return not self.is_batch[job] or promoted(created, created + self.cfg.batch_timeout_s, now)

    def _settle(self, jobs: int, batch_jobs: int) -> None:
        """Jobs with an outcome; the oldest batch job without one bounds the batch jobs' deadline."""
        self._settled += jobs
        self._batch_settled += batch_jobs
        queued, ended = self._order_list[1], self.completed_at
        while self._oldest_batch < len(queued) and (
            self.failed[queued[self._oldest_batch]] or not math.isnan(ended[queued[self._oldest_batch]])
        ):
            self._oldest_batch += 1

    # -- the pool -------------------------------------------------------------------------------
    def _add_worker(self, now: float, ready_at: float) -> None:
        worker = _Worker(index=len(self.workers), requested_at=now, ready_at=ready_at)
        self.workers.append(worker)
        if ready_at <= now:
            self._record_pool(now)
        else:
            self._push(ready_at, _READY)

    def _active(self) -> list[_Worker]:
        return [w for w in self.workers if not w.draining and w.retired_at == math.inf]

    def _record_pool(self, now: float) -> None:
        """The pool changed: the dispatcher's candidates are the READY workers, oldest first."""
        self._candidates = [w.id for w in self._active() if w.ready_at <= now]
        self._view = None
        if self.pool[-1][1] != len(self._candidates):
            self.pool.append((now, len(self._candidates)))

    def _tick(self, now: float) -> None:
        """The autoscaler's loop: a snapshot as `AutoscalerLoop.snapshot` takes it, then the policy."""
        assert self.autoscaler is not None
        arrived = bisect.bisect_right(self.created_list, now)
        if arrived > self._settled:  # stream entries exist until their outcome is written
            self._last_job_at = now
        up = [w for w in self.workers if w.retired_at == math.inf]
        self.worker_pool.track([w.id for w in up], now)  # as the manager's sampler does, each second
        busy = self.worker_pool.busy_seconds(now)  # the ratio as AutoscalerLoop._busy_ratio takes it
        then, busy_then = self._busy_mark
        self._busy_mark = (now, busy)
        wall = (now - then) * max(1, len(up))
        arrived_batch = self._batch_upto[arrived]
        queued = self._order_list[1]
        oldest = self._oldest_batch
        load = LoadSnapshot(
            now=now,
            # Waiting jobs of interactive priority, promoted batch jobs left out as the dispatcher does.
            backlog=arrived - arrived_batch - self._head[0] + sum(not self.is_batch[j] for j in self._retry),
            running=len(self._candidates),
            throughput=self.worker_pool.throughput(now),
            busy_ratio=min(1.0, max(0.0, (busy - busy_then) / wall)) if wall > 0 else 0.0,
            last_job_at=self._last_job_at,
            batch_backlog=arrived_batch - self._batch_settled,  # the batch stream's length
            batch_due_s=(
                self.created_list[queued[oldest]] + self.cfg.batch_timeout_s - now
                if oldest < arrived_batch
                else None
            ),
        )
        decision = self.autoscaler.decide(load, self._desired)
        if decision.desired != self._desired:
            self._set_desired(now, decision.desired)

    def _set_desired(self, now: float, count: int) -> None:
        self._desired = count
        active = self._active()
        for _ in range(count - len(active)):
            self._add_worker(now, ready_at=now + self.cfg.startup_s)
        for worker in reversed(active[count:] if count < len(active) else []):  # newest first
            worker.draining = True
            if self.worker_pool.inflight(worker.id) == 0:
                worker.retired_at = now
        self._record_pool(now)

    # -- figures --------------------------------------------------------------------------------
    def _result(self, now: float) -> SimResult:
        warm = self.created >= self.cfg.warmup_s
        created = self.created[warm]
        done = warm & ~np.isnan(self.completed_at)
        latencies = self.completed_at - self.created
        start = float(created[0]) if len(created) else 0.0
        end = float(created[-1]) if len(created) else 0.0
        return SimResult(
            latencies_s=latencies[done & ~self.is_batch],
            batch_sizes=np.asarray([b.size for b in self.batches], dtype=int),
            busy_ratio=self._busy_ratio(start, end),
            worker_seconds=sum(min(w.retired_at, now) - w.requested_at for w in self.workers),
            window_s=end - start,
            completed=int(np.count_nonzero(done)),
            pool=self.pool,
            horizon_s=now,
            failed=int(np.count_nonzero(self.failed[warm])),
            batch_latencies_s=latencies[done & self.is_batch],
        )

    def _busy_ratio(self, start: float, end: float) -> float:
        """In-flight time inside [start, end] over the time workers were up inside it."""
        if end <= start:
            return 0.0
        busy = up = 0.0
        for worker in self.workers:
            for s, e in worker.intervals:
                busy += max(0.0, min(e, end) - max(s, start))
            up += max(0.0, min(worker.retired_at, end) - max(worker.ready_at, start))
        return busy / up if up > 0 else 0.0


def simulate(
    config: SimConfig, arrivals: Floats, horizon_s: float = 0.0, batch: Bools | None = None
) -> SimResult:
    return Simulation(config, arrivals, batch).run(horizon_s)
