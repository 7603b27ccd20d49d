"""The batching policy: pure code that decides when a batch closes. Time comes in, a decision goes out.

A batch closes when it is full (the model's max_batch_size), when its oldest job has waited
max_wait_s, or at once when a worker sits idle, so the GPU never waits while jobs do. When every
worker with room is busy, a partial batch goes only `lead_s` before the first of them is expected
to finish: it keeps gathering jobs rather than waiting in Triton's queue, and still arrives before
the GPU falls idle (queued early, small batches cost a flat-latency GPU a whole batch time each).
The manager's loop and the capacity simulator drive the same object, with a real and a virtual clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BatchDecision:
    """Dispatch `take` jobs now, or (take == 0) look again at `wake_at`, or on the next event if None."""

    take: int
    wake_at: float | None = None


WAIT_FOR_EVENT = BatchDecision(take=0)


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    max_batch_size: int
    max_wait_s: float
    lead_s: float = 0.005  # how long before a busy worker frees up its next batch should reach it

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.max_wait_s < 0:
            raise ValueError(f"max_wait_s must be >= 0, got {self.max_wait_s}")

    def decide(
        self,
        *,
        now: float,
        pending: int,
        oldest_at: float | None,
        idle_worker: bool,
        free_slot: bool,
        busy_until: float | None = None,
    ) -> BatchDecision:
        """What to do with `pending` queued jobs, the oldest of which arrived at `oldest_at`.

        idle_worker: some worker for this model has no batch at all in flight.
        free_slot: some worker for this model can take one more batch.
        busy_until: when the first busy worker with room is expected to finish (None: unknown).
        """
        if pending <= 0 or oldest_at is None or not free_slot:
            return WAIT_FOR_EVENT
        take = min(pending, self.max_batch_size)
        if pending >= self.max_batch_size or idle_worker:
            return BatchDecision(take=take)
        deadline = oldest_at + self.max_wait_s
        if busy_until is not None:
            deadline = max(deadline, busy_until - self.lead_s)
        if now >= deadline:
            return BatchDecision(take=take)
        return BatchDecision(take=0, wake_at=deadline)
