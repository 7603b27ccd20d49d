"""A discrete-event simulator of Synapse: the manager's own batching and autoscaling policy objects,
driven by a virtual clock, in front of workers modelled as servers that take T(b) per batch.

What it models, because the real system does it:
- the dispatcher's rules: a batch goes to the READY worker with the fewest batches in flight, at
  most `max_inflight` per worker; the worker runs its batches one at a time, in order (Triton's
  queue for a model with one instance), so a second batch in flight waits on the worker;
- the batching policy (`manager.batching.BatchPolicy`) with the manager's window, asked whenever
  something changes: a job becomes visible, a batch returns, a worker joins, the window closes;
- constant overheads measured on the real stack: submit to the manager holding the job, batch cut
  to the worker starting it, worker done to the manager holding the outcome;
- optionally the autoscaler (`manager.autoscaling.Autoscaler`) ticking once a second, with a
  worker start-up time, for scale-from-zero and trace-driven runs.
- the reader: one read returns, a round trip later, every job submitted by the time it started,
  so the policy is asked once per read (as the dispatcher is), not once per job.
Arrivals live in a sorted array (jobs are taken first in, first out, so pending jobs are an index
range), and only batch completions, timers and worker starts go through the event heap: 20,000
jobs a second for a minute runs in seconds.
"""

from __future__ import annotations

import bisect
import heapq
import math
import re
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from manager.autoscaling import Autoscaler, LoadSnapshot, ScalingLimits
from manager.batching import BatchPolicy

# Event kinds, in the order they are handled when they fall on the same instant.
_DONE, _READY, _WAKE, _TICK = 0, 1, 2, 3
GIVE_UP_AFTER_S = 3600.0

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int_]


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

    def __post_init__(self) -> None:
        if self.max_inflight < 1 or self.max_batch < 1:
            raise ValueError("max_inflight and max_batch must be >= 1")
        if self.scaling is None and self.workers < 1:
            raise ValueError("a fixed pool needs at least one worker")


@dataclass(slots=True)
class _Worker:
    index: int
    requested_at: float
    ready_at: float = math.inf
    retired_at: float = math.inf
    inflight: int = 0
    free_at: float = 0.0  # when the worker finishes the last batch queued on it
    busy_since: float = 0.0
    draining: bool = False
    intervals: list[tuple[float, float]] = field(default_factory=list)  # time with a batch in flight


@dataclass(frozen=True, slots=True)
class SimResult:
    """What a run produced; figures cover jobs created at or after the warm-up."""

    latencies_s: Floats  # per job, created -> manager holds the outcome
    batch_sizes: Ints
    busy_ratio: float  # union of in-flight time per worker / (window * workers up), as measured
    worker_seconds: float  # every worker from the moment it was asked for until it stopped
    window_s: float
    completed: int
    pool: list[tuple[float, int]]  # (time, workers READY) at every change
    horizon_s: float

    def percentile_ms(self, q: float) -> float:
        return float(np.percentile(self.latencies_s, q) * 1000) if len(self.latencies_s) else math.nan

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
    """One run over a fixed set of arrival times; `run()` once."""

    def __init__(self, config: SimConfig, arrivals: Floats) -> None:
        self.cfg = config
        self.created = np.sort(np.asarray(arrivals, dtype=float))
        self.created_list: list[float] = self.created.tolist()
        self.policy = BatchPolicy(max_batch_size=config.max_batch, max_wait_s=config.max_wait_s)
        self.autoscaler = Autoscaler(config.scaling) if config.scaling else None
        self.completed_at = np.full(len(self.created), math.nan)
        self.batch_sizes: list[int] = []
        self.workers: list[_Worker] = []
        self.by_inflight: list[set[int]] = [set() for _ in range(config.max_inflight + 1)]
        self.pool: list[tuple[float, int]] = [(0.0, 0)]
        self._events: list[tuple[float, int, int, int, int, int]] = []
        self._seq = 0
        self._head = 0  # first pending job
        self._seen = 0  # jobs visible to the manager
        self._done_jobs = 0
        self._busy_sum = 0.0  # sum of batch durations, as Fleet.busy_s counts them
        self._busy_mark = (0.0, 0.0)
        self._last_job_at: float | None = None
        self._desired = 0
        self._last_wake = -1.0

    # -- events -------------------------------------------------------------------------------
    def _push(self, at: float, kind: int, a: int = 0, b: int = 0, c: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, kind, self._seq, a, b, c))

    def run(self, horizon_s: float = 0.0) -> SimResult:
        """Simulates until every job is done and, with autoscaling, until `horizon_s`."""
        if self.autoscaler is None:
            for _ in range(self.cfg.workers):
                self._add_worker(0.0, ready_at=0.0)
        else:
            self._push(0.0, _TICK)
        events = self._events
        free_levels = self.by_inflight[: self.cfg.max_inflight]
        now = 0.0
        read_at, read_upto = self._next_read(0.0)
        while True:
            next_event = events[0][0] if events else math.inf
            if read_at == math.inf and (next_event == math.inf or self._finished(now, horizon_s)):
                break
            if read_at <= next_event:
                now = read_at
                self._seen = read_upto
                read_at, read_upto = self._next_read(now)
                if not any(free_levels):
                    continue  # the dispatcher needs a free slot: nothing happens before the next event
            else:
                at, kind, _, a, b, c = heapq.heappop(events)
                now = at
                self._handle(now, kind, a, b, c)
            self._dispatch(now)
        return self._result(now)

    def _next_read(self, start: float) -> tuple[float, int]:
        """The manager's reader: a read started at `start` returns, one round trip later, every job
        created by then; with none waiting it blocks until the next one is created."""
        created = self.created_list
        if self._seen >= len(created):
            return math.inf, self._seen
        since = max(start, created[self._seen])
        return since + self.cfg.overheads.read_s, bisect.bisect_right(created, since, lo=self._seen)

    def _finished(self, now: float, horizon_s: float) -> bool:
        all_done = self._done_jobs == len(self.created)
        if self.autoscaler is not None and now > horizon_s + GIVE_UP_AFTER_S:
            return True  # a pool that never serves (max_workers 0): stop rather than tick forever
        return all_done and (self.autoscaler is None or now >= horizon_s)

    def _handle(self, now: float, kind: int, a: int, b: int, c: int) -> None:
        if kind == _DONE:
            self._batch_done(now, self.workers[a], b, c)
        elif kind == _READY:
            worker = self.workers[a]
            if not worker.draining and worker.retired_at == math.inf:
                self.by_inflight[0].add(worker.index)
                self._record_pool(now)
        elif kind == _TICK:
            self._tick(now)
            self._push(now + self.cfg.tick_s, _TICK)

    # -- dispatching ----------------------------------------------------------------------------
    def _pick(self) -> _Worker | None:
        """The READY worker with the fewest batches in flight, the oldest first among equals."""
        for level in range(self.cfg.max_inflight):
            bucket = self.by_inflight[level]
            if bucket:
                return self.workers[min(bucket)]
        return None

    def _dispatch(self, now: float) -> None:
        free_levels = self.by_inflight[: self.cfg.max_inflight]
        created = self.created_list
        while self._head < self._seen:
            decision = self.policy.decide(
                now=now,
                pending=self._seen - self._head,
                oldest_at=created[self._head],
                idle_worker=bool(free_levels[0]),
                free_slot=any(free_levels),
                busy_until=self._busy_until(),
            )
            worker = self._pick() if decision.take else None
            if worker is None:
                if decision.wake_at is not None and decision.wake_at != self._last_wake:
                    self._last_wake = decision.wake_at
                    self._push(decision.wake_at, _WAKE)
                return
            first = self._head
            self._head += decision.take
            self._start_batch(now, worker, first, self._head)

    def _busy_until(self) -> float | None:
        """When the first busy worker with room frees up: the simulator knows exactly."""
        times = [
            self.workers[i].free_at
            for level in range(1, self.cfg.max_inflight)
            for i in self.by_inflight[level]
        ]
        return min(times, default=None)

    def _start_batch(self, now: float, worker: _Worker, first: int, last: int) -> None:
        size = last - first
        self.by_inflight[worker.inflight].discard(worker.index)
        if worker.inflight == 0:
            worker.busy_since = now
        worker.inflight += 1
        self.by_inflight[worker.inflight].add(worker.index)
        start = max(now + self.cfg.overheads.send_s, worker.free_at)
        worker.free_at = start + self.cfg.profile.seconds(size) + self.cfg.overheads.exec_s
        done = worker.free_at + self.cfg.overheads.reply_s
        self._busy_sum += done - now
        self.batch_sizes.append(size)
        self._push(done, _DONE, worker.index, first, last)

    def _batch_done(self, now: float, worker: _Worker, first: int, last: int) -> None:
        self.completed_at[first:last] = now
        self._done_jobs += last - first
        self.by_inflight[worker.inflight].discard(worker.index)
        worker.inflight -= 1
        if worker.inflight == 0:
            worker.intervals.append((worker.busy_since, now))
        if worker.draining:
            if worker.inflight == 0:
                self._retire(now, worker)
        elif worker.ready_at <= now:
            self.by_inflight[worker.inflight].add(worker.index)

    # -- the pool -------------------------------------------------------------------------------
    def _add_worker(self, now: float, ready_at: float) -> None:
        worker = _Worker(index=len(self.workers), requested_at=now, ready_at=ready_at)
        self.workers.append(worker)
        if ready_at <= now:
            self.by_inflight[0].add(worker.index)
            self._record_pool(now)
        else:
            self._push(ready_at, _READY, worker.index)

    def _retire(self, now: float, worker: _Worker) -> None:
        worker.retired_at = now
        for bucket in self.by_inflight:
            bucket.discard(worker.index)
        self._record_pool(now)

    def _active(self) -> list[_Worker]:
        return [w for w in self.workers if not w.draining and w.retired_at == math.inf]

    def _record_pool(self, now: float) -> None:
        ready = sum(1 for w in self._active() if w.ready_at <= now)
        if self.pool[-1][1] != ready:
            self.pool.append((now, ready))

    def _tick(self, now: float) -> None:
        """The autoscaler's loop: a snapshot as `AutoscalerLoop.snapshot` takes it, then the policy."""
        assert self.autoscaler is not None
        arrived = bisect.bisect_right(self.created_list, now)
        if arrived > self._done_jobs:  # stream entries exist until their outcome is written
            self._last_job_at = now
        up = [w for w in self.workers if w.retired_at == math.inf]
        then, busy_then = self._busy_mark
        self._busy_mark = (now, self._busy_sum)
        wall = (now - then) * max(1, len(up))
        load = LoadSnapshot(
            now=now,
            backlog=arrived - self._head,
            running=sum(1 for w in up if w.ready_at <= now and not w.draining),
            throughput=(self._done_jobs / self._busy_sum) if self._busy_sum > 0 else 0.0,
            busy_ratio=min(1.0, max(0.0, (self._busy_sum - busy_then) / wall)) if wall > 0 else 0.0,
            last_job_at=self._last_job_at,
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
            for bucket in self.by_inflight:
                bucket.discard(worker.index)
            if worker.inflight == 0:
                self._retire(now, worker)
        self._record_pool(now)

    # -- figures --------------------------------------------------------------------------------
    def _result(self, now: float) -> SimResult:
        warm = self.created >= self.cfg.warmup_s
        created = self.created[warm]
        latencies = (self.completed_at - self.created)[warm]
        start = float(created[0]) if len(created) else 0.0
        end = float(created[-1]) if len(created) else 0.0
        return SimResult(
            latencies_s=latencies,
            batch_sizes=np.asarray(self.batch_sizes, dtype=int),
            busy_ratio=self._busy_ratio(start, end),
            worker_seconds=sum(min(w.retired_at, now) - w.requested_at for w in self.workers),
            window_s=end - start,
            completed=int(np.count_nonzero(~np.isnan(latencies))),
            pool=self.pool,
            horizon_s=now,
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


def simulate(config: SimConfig, arrivals: Floats, horizon_s: float = 0.0) -> SimResult:
    return Simulation(config, arrivals).run(horizon_s)
