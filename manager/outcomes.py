"""How a delivery ends: pure functions from a job and what happened to it to the Outcome written back."""

from __future__ import annotations

from typing import Any

from contract.jobs import CANCELLED_CODE, EmbeddingOptions, JobStatus, Outcome, now_ms
from manager.queue import Delivery
from manager.triton import Embedded, Generated, RowResult

DEADLINE_EXCEEDED = "deadline_exceeded"
MAX_ATTEMPTS_EXCEEDED = "max_attempts_exceeded"
MODEL_ERROR = "model_error"
INPUT_TOO_LONG = "input_too_long"


def from_row(delivery: Delivery, row: RowResult, *, started_ms: int, completed_ms: int, size: int) -> Outcome:
    """A model's answer for one job; a row with an error fails that job alone."""
    if row.error:
        return failed(
            delivery, MODEL_ERROR, row.error, started_ms=started_ms, completed_ms=completed_ms, size=size
        )
    return completed(
        delivery, started_ms=started_ms, completed_ms=completed_ms, size=size, text=row.text,
        prompt_tokens=row.prompt_tokens, completion_tokens=row.completion_tokens,
    )  # fmt: skip


def from_embedded(
    delivery: Delivery, rows: Embedded, *, window: int | None, started_ms: int, completed_ms: int, size: int
) -> Outcome:
    """An embedding job's vectors, one row per text. A text that failed fails the job; so does one cut to
    the model's window when the job asked for no truncation (`truncate: false`)."""
    times = {"started_ms": started_ms, "completed_ms": completed_ms, "size": size}
    failing = next((i for i, error in enumerate(rows.errors) if error), None)
    if failing is not None:
        return failed(delivery, MODEL_ERROR, f"input {failing}: {rows.errors[failing]}", **times)
    cut = next((i for i, t in enumerate(rows.truncated) if t), None)
    options = delivery.job.parameters
    if cut is not None and isinstance(options, EmbeddingOptions) and not options.truncate:
        limit = f"the model's {window}-token window" if window else "the model's window"
        message = f"input {cut} is longer than {limit}; shorten it, or send truncate: true to have it cut"
        return failed(delivery, INPUT_TOO_LONG, message, **times)
    return completed(
        delivery, **times, prompt_tokens=sum(rows.prompt_tokens),
        embeddings=rows.vectors.astype("<f4", copy=False).tobytes(), dimensions=rows.vectors.shape[1],
        truncated=tuple(rows.truncated),
    )  # fmt: skip


def from_generated(delivery: Delivery, generated: Generated, *, started_ms: int, size: int) -> Outcome:
    """A generation the engine ended (by length, a stop, or the end of its text)."""
    first = generated.choices[0]
    sampling = delivery.job.parameters
    detailed = len(generated.choices) > 1 or getattr(sampling, "logprobs", None) is not None
    return completed(
        delivery, started_ms=started_ms, completed_ms=now_ms(), size=size, text=first.text,
        prompt_tokens=generated.prompt_tokens, completion_tokens=generated.completion_tokens,
        finish_reason=first.finish_reason, choices=generated.choices if detailed else (),
    )  # fmt: skip


def completed(delivery: Delivery, *, started_ms: int, completed_ms: int, size: int, **result: Any) -> Outcome:
    """A job that ran to its end with this result (Outcome's result fields: text, vectors, counts)."""
    return Outcome(
        job_id=delivery.job.id, status=JobStatus.COMPLETED, started_ms=started_ms, completed_ms=completed_ms,
        batch_size=size, **result,
    )  # fmt: skip


def failed(
    delivery: Delivery, code: str, message: str, *, started_ms: int, completed_ms: int, size: int = 0
) -> Outcome:
    return _without_result(
        delivery, JobStatus.FAILED, code, message, started=started_ms, ended=completed_ms, size=size
    )


def overdue(delivery: Delivery, now_ms: int, *, running: bool = False) -> Outcome:
    """A job past its deadline: before it could run, or while it ran (its worker hung or was too slow)."""
    when = "while it ran" if running else "before it could run"
    return failed(
        delivery,
        DEADLINE_EXCEEDED,
        f"the job's deadline passed {when}",
        started_ms=now_ms,
        completed_ms=now_ms,
    )


def exhausted(delivery: Delivery, reason: str, now_ms: int) -> Outcome:
    message = f"gave up after {delivery.attempt} attempts; last error: {reason}"
    return failed(delivery, MAX_ATTEMPTS_EXCEEDED, message, started_ms=now_ms, completed_ms=now_ms)


def cancelled(delivery: Delivery, reason: str, started_ms: int) -> Outcome:
    """A job its client stopped: before it ran, or while it ran (what the model answered is dropped)."""
    return _without_result(
        delivery, JobStatus.CANCELLED, CANCELLED_CODE, reason, started=started_ms, ended=now_ms()
    )


def _without_result(
    delivery: Delivery, status: JobStatus, code: str, message: str, *, started: int, ended: int, size: int = 0
) -> Outcome:
    """A job that ended with no result: its error code and message instead."""
    return Outcome(
        job_id=delivery.job.id, status=status, started_ms=started, completed_ms=ended, batch_size=size,
        error_code=code, error_message=message,
    )  # fmt: skip
