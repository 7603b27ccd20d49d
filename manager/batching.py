"""The batching policy: pure code that decides when a batch closes. Time comes in, a decision goes out.

A batch closes when it is full (the model's max_batch_size), when its oldest job has waited
max_wait_s, or at once when a worker sits idle, so the GPU never waits while jobs do. When every
worker with room is busy, a partial batch goes only `lead_s` before the first of them is expected
to finish: it keeps gathering jobs rather than waiting in Triton's queue, and still arrives before
the GPU falls idle (queued early, small batches cost a flat-latency GPU a whole batch time each).

Two priorities (contract.jobs.Priority). Interactive jobs decide alone, as above; a batch they close
is topped up with batch jobs while it has room, which costs the interactive jobs nothing but the
per-item time. Batch jobs alone go only to a worker with no batch in flight, never into Triton's
queue behind another batch: an interactive job arriving then waits for at most that one batch. They
go as a full batch, or once the oldest has waited `batch_wait_s`: a GPU's time per job is lowest in a
full batch, and batch jobs' deadlines leave room to gather one. A
batch job counts as interactive once half its time to its deadline has passed (`promoted`), so a
steady interactive load cannot hold it past its deadline.
The manager's loop and the capacity simulator drive the same object, with a real and a virtual clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BatchDecision:
    """Dispatch `take` interactive jobs topped up with `fill` batch jobs now, or (nothing to dispatch)
    look again at `wake_at`, or on the next event if None."""

    take: int
    fill: int = 0
    wake_at: float | None = None

    @property
    def size(self) -> int:
        return self.take + self.fill


WAIT_FOR_EVENT = BatchDecision(take=0)


def promoted(created: float, deadline: float, now: float) -> bool:
    """Whether a batch job has used half its time to its deadline: from then on it goes as interactive.

    Any one clock and unit (the dispatcher's wall-clock ms, the simulator's seconds)."""
    return 2 * now >= created + deadline


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    max_batch_size: int
    max_wait_s: float
    lead_s: float = 0.005  # how long before a busy worker frees up its next batch should reach it
    batch_wait_s: float = 1.0  # the window of batch jobs alone: they go as a full batch, or after this

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
        batch_pending: int = 0,
        batch_oldest_at: float | None = None,
    ) -> BatchDecision:
        """What to do with `pending` queued interactive jobs, the oldest of which arrived at `oldest_at`,
        and `batch_pending` queued batch jobs, the oldest of which arrived at `batch_oldest_at`.

        idle_worker: some worker for this model has no batch at all in flight.
        free_slot: some worker for this model can take one more batch.
        busy_until: when the first busy worker with room is expected to finish (None: unknown).
        """
        if not free_slot:
            return WAIT_FOR_EVENT
        if pending <= 0 or oldest_at is None:
            if batch_pending <= 0 or not idle_worker:
                return WAIT_FOR_EVENT
            # Alone, batch jobs wait for a full batch (their deadline allows it; a GPU's time per job is
            # lowest there), or for batch_wait_s, so that a few of them on an idle pool still run soon.
            ready_at = None if batch_oldest_at is None else batch_oldest_at + self.batch_wait_s
            if batch_pending >= self.max_batch_size or ready_at is None or now >= ready_at:
                return BatchDecision(take=0, fill=min(batch_pending, self.max_batch_size))
            return BatchDecision(take=0, wake_at=ready_at)
        if pending < self.max_batch_size and not idle_worker:
            deadline = oldest_at + self.max_wait_s
            if busy_until is not None:
                deadline = max(deadline, busy_until - self.lead_s)
            if now < deadline:
                return BatchDecision(take=0, wake_at=deadline)
        take = min(pending, self.max_batch_size)
        return BatchDecision(take=take, fill=min(batch_pending, self.max_batch_size - take))
