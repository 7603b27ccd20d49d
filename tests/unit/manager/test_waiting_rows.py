"""A manager's buffer cuts batches in rows: a text of an embedding job is a row, a prompt job is one."""

from __future__ import annotations

from collections import deque

from contract.jobs import Job, Priority
from manager.batching import BatchDecision
from manager.queue import Delivery, Waiting, head_rows


def embedding_job(texts: int, priority: Priority) -> Job:
    return Job.new(
        model="minilm", prompt="", max_tokens=0, timeout_ms=60_000, priority=priority,
        inputs=tuple(f"text {t}" for t in range(texts)),
    )  # fmt: skip


def waiting_jobs(*rows: int, priority: Priority = Priority.INTERACTIVE) -> list[Delivery]:
    """Embedding jobs of these many texts each, as the reader hands them over."""
    return [Delivery(f"{i}-0", embedding_job(n, priority)) for i, n in enumerate(rows)]


def test_whole_jobs_are_cut_while_their_rows_fit_and_a_job_larger_than_a_batch_goes_alone():
    buffer = Waiting()
    buffer.add(waiting_jobs(3, 3, 3, 20, 1))
    assert head_rows(buffer.interactive, 8) == 8  # 3 + 3, and the next 3 cannot join: as full as it gets
    assert [d.job.rows for d in buffer.cut(BatchDecision(take=8))] == [3, 3]
    assert head_rows(buffer.interactive, 8) == 8  # 3, then 20: the batch cannot grow
    assert [d.job.rows for d in buffer.cut(BatchDecision(take=8))] == [3]
    assert head_rows(buffer.interactive, 8) == 8  # the 20-row job alone fills a batch
    assert [d.job.rows for d in buffer.cut(BatchDecision(take=8))] == [20]
    assert head_rows(buffer.interactive, 8) == 1  # one row: worth waiting for the window to fill it
    assert [d.job.rows for d in buffer.cut(BatchDecision(take=1))] == [1]


def test_batch_jobs_top_up_what_the_interactive_ones_leave_in_rows():
    buffer = Waiting()
    buffer.add(waiting_jobs(2, 2))
    buffer.add(waiting_jobs(3, 1, 4, priority=Priority.BATCH))
    cut = buffer.cut(BatchDecision(take=4, fill=4))
    assert [(d.job.priority.value, d.job.rows) for d in cut] == [
        ("interactive", 2), ("interactive", 2), ("batch", 3), ("batch", 1),
    ]  # fmt: skip
    assert [d.job.rows for d in buffer.batch] == [4]


def prompt_jobs(count: int) -> list[Delivery]:
    job = Job.new(model="gpu-sim", prompt="p", max_tokens=1, timeout_ms=60_000)
    return [Delivery(f"{i}-0", job) for i in range(count)]


def test_prompt_jobs_are_a_row_each():
    assert head_rows(deque(prompt_jobs(3)), 8) == 3
    buffer = Waiting()
    buffer.add(prompt_jobs(10))
    cut = buffer.cut(BatchDecision(take=8))
    assert len(cut) == 8 and len(buffer.interactive) == 2
