"""What a model's dispatcher asks of the runner of its kind: send, cancel, drain.

The dispatcher reads and buffers a model's jobs whatever the model is; how they run depends on its kind
(the model catalog's), and only the runner of that kind knows how: one-shot batches (`one_shot.py`),
embedding batches split by texts (`embedding.py`), or generations on continuous-batching engines
(`generation.py`). Every runner writes what happens to its jobs through the model's `Settler`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable, Sequence

from contract.time_limit import stop
from manager.queue import Delivery, Waiting


class Runner:
    """The base of the runners: the jobs and tasks in flight, and the defaults of a job a row.

    drains_waiting: on shutdown, whether jobs read but not started still run while workers allow (a
    batch takes a fraction of a second); a generation takes seconds, and one cut off at the drain's
    timeout would cost its job an attempt, so a generative runner starts nothing new.
    """

    drains_waiting = True

    def __init__(self) -> None:
        self.running: dict[str, Delivery] = {}  # by job id: entry ids of the two streams may be equal
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, waiting: Waiting) -> float | None:
        """Starts what can start now (taking it from `waiting`); returns when to look again (on the
        monotonic clock), or None for the next event."""
        raise NotImplementedError

    async def cancel(self, job_id: str, reason: str) -> bool:
        """Stops a job this runner started; returns whether it had it."""
        raise NotImplementedError

    def sequences(self) -> tuple[int, int] | None:
        """Running sequences and their budget per worker, for a generative model; None otherwise."""
        return None

    @property
    def busy(self) -> bool:
        """Whether some job is still in flight (its outcome unwritten)."""
        return bool(self._tasks)

    def track(self, task: asyncio.Task[None]) -> None:
        """A task that holds jobs until it writes their outcomes: drain waits for it or cancels it."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Cancels what still runs: the dispatcher hands those jobs back to the group."""
        for task in list(self._tasks):
            await stop(task)

    def done_with(self, deliveries: Iterable[Delivery]) -> None:
        """Forgets the deliveries once their outcomes are written (a retry may hold the job by now)."""
        for delivery in deliveries:
            if self.running.get(delivery.job.id) is delivery:
                del self.running[delivery.job.id]

    def rows(self, held: Collection[Delivery]) -> int:
        """The rows these jobs are, in the unit the model batches: a job each."""
        return len(held)

    def entries_for(self, rows: int) -> int:
        """How many stream entries to read for this much room, in rows."""
        return rows

    def observe(self, deliveries: Sequence[Delivery]) -> None:
        """Jobs just read (an embedding runner learns their rows per job)."""
