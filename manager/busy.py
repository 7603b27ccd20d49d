"""How busy each worker is, as the manager sees it: the time it has at least one batch in flight.

Two overlapping batches on one worker count once, so busy seconds never outrun wall seconds and
`rate(synapse_worker_busy_seconds_total[w])` is the worker's busy ratio over w. Pure: every call
takes the time (monotonic seconds) as an argument, so tests drive it with a virtual clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(slots=True)
class _WorkerClock:
    inflight: int = 0
    since: float = 0.0  # when the current busy stretch began (inflight went from 0 to 1)
    closed_s: float = 0.0  # busy seconds of the stretches that ended
    samples: deque[tuple[float, float]] = field(default_factory=deque)  # (time, busy seconds)

    def busy_s(self, now: float) -> float:
        return self.closed_s + (now - self.since if self.inflight else 0.0)


class BusyClock:
    """Busy seconds per worker, and the busy ratio over a sliding window of `window_s`."""

    def __init__(self, window_s: float = 60.0) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self.window_s = window_s
        self._workers: dict[str, _WorkerClock] = {}

    def begin(self, worker: str, now: float) -> None:
        """A batch was sent to the worker."""
        clock = self._workers.setdefault(worker, _WorkerClock())
        if clock.inflight == 0:
            clock.since = now
        clock.inflight += 1

    def end(self, worker: str, now: float) -> None:
        """A batch came back (or failed); a worker already forgotten is ignored."""
        clock = self._workers.get(worker)
        if clock is None or clock.inflight == 0:
            return
        clock.inflight -= 1
        if clock.inflight == 0:
            clock.closed_s += max(0.0, now - clock.since)

    def track(self, workers: Iterable[str], now: float) -> None:
        """Follows the pool: new workers start at zero; gone ones are dropped once nothing runs on them.

        Also takes the sample the windowed ratio is computed from, so call it about once a second.
        """
        present = set(workers)
        for worker in present:
            self._workers.setdefault(worker, _WorkerClock())
        for worker in [w for w, c in self._workers.items() if w not in present and c.inflight == 0]:
            del self._workers[worker]
        for clock in self._workers.values():
            clock.samples.append((now, clock.busy_s(now)))
            # Keep one sample at or before the window's start, so the ratio covers the whole window.
            while len(clock.samples) > 1 and clock.samples[1][0] <= now - self.window_s:
                clock.samples.popleft()

    def workers(self) -> list[str]:
        return sorted(self._workers)

    def busy_seconds(self, worker: str, now: float) -> float:
        clock = self._workers.get(worker)
        return 0.0 if clock is None else clock.busy_s(now)

    def ratio(self, worker: str, now: float) -> float:
        """Busy time over wall time since the oldest sample in the window (0 before two samples)."""
        clock = self._workers.get(worker)
        if clock is None or not clock.samples:
            return 0.0
        start, busy_then = clock.samples[0]
        if now - start <= 0:
            return 0.0
        return min(1.0, max(0.0, (clock.busy_s(now) - busy_then) / (now - start)))
