"""Runs an embedding model's jobs: batches counted in texts, a job's texts split back from the vectors.

An embedding job carries N texts (N rows); jobs ride in the same batches while their rows fit the
model's max_batch_size, and a job larger than a batch goes alone, as several requests one after
another (`TritonClient.embed`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection, Sequence

from contract.jobs import Outcome, now_ms
from manager import outcomes
from manager.fleet import WorkerSlot
from manager.one_shot import OneShotRunner
from manager.queue import Delivery, head_rows


class EmbeddingRunner(OneShotRunner):
    """Batches of texts: the buffers, the reads and the policy's sizes count rows, not jobs."""

    _rows_per_job = 1.0  # recent reads' mean texts per job

    def rows(self, held: Collection[Delivery]) -> int:
        """Texts, so that jobs of many texts cannot pile up in one manager while others sit idle."""
        return sum(d.job.rows for d in held)

    def entries_for(self, rows: int) -> int:
        """Rows over the rows per job seen lately, so that one read of large jobs stays near the room."""
        return max(1, int(rows / self._rows_per_job))

    def observe(self, deliveries: Sequence[Delivery]) -> None:
        mean = sum(d.job.rows for d in deliveries) / len(deliveries)
        self._rows_per_job = max(1.0, (self._rows_per_job + mean) / 2)

    def _timeout_s(self, live: Sequence[Delivery]) -> float:
        """The jobs' deadlines alone: a pass takes as long as its texts are (64 sentences or 64 texts of
        256 tokens differ fifty-fold on a CPU), which no measured time tells; each request is bounded
        by its own timeout (SYNAPSE_TRITON_TIMEOUT_S) instead."""
        return self._until_deadline_s(live)

    def _pending(self, waiting: deque[Delivery], limit: int) -> int:
        return head_rows(waiting, limit)

    def _requests(self, batch: Sequence[Delivery]) -> int:
        """Its rows over the model's max_batch_size, rounded up."""
        rows = sum(d.job.rows for d in batch)
        return max(1, math.ceil(rows / self.policy.max_batch_size))

    async def _results(self, slot: WorkerSlot, runnable: Sequence[Delivery], started: int) -> list[Outcome]:
        """Every text of the batch's jobs in one call, the vectors split back per job in order."""
        texts = [text for d in runnable for text in d.job.texts]
        embedded = await slot.client.embed(self.model, texts, self.policy.max_batch_size)
        finished = now_ms()
        found: list[Outcome] = []
        start = 0
        for delivery in runnable:
            rows = embedded.rows(start, start + delivery.job.rows)
            start += delivery.job.rows
            outcome = outcomes.from_embedded(
                delivery, rows, window=self.config.max_model_len, started_ms=started, completed_ms=finished,
                size=len(texts),
            )  # fmt: skip
            found.append(outcome)
        return found
