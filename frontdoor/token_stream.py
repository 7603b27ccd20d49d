"""Follows one job to its end as a sequence of token events (contract/tokens.py), for streaming readers.

A generative job's text arrives in its token stream while it runs; a one-shot job's arrives whole
when it is final (its done-list wakes the reader). Either way the reader gets deltas, maybe a reset,
and one `End`, built from the job's hash when the stream holds none (the job failed before it ran,
or its manager died before writing it). The follow never outlives the job's deadline by more than
`GRACE_S`: a job nobody runs still ends for its reader.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from contract import tokens
from contract.job_record import JobRecord, read_record
from contract.jobs import JobStatus
from contract.keys import done_key, tokens_key
from contract.redis_client import AsyncRedis
from openai_api.format import answer_from

BLOCK_MS = 1000  # a blocked read wakes this often to look at the job's status
GRACE_S = 10.0
READ_COUNT = 512
NO_RESULT = "deadline_exceeded"


def end_of(record: JobRecord) -> list[tokens.Event]:
    """The events a final job's record stands for: its whole text as one delta (if any), then its end.
    An embedding job has no text: its end alone."""
    status = record.status
    if record.holds_vectors:
        return [tokens.End("", status)]  # vectors, not text: the end event's view carries them
    if status is JobStatus.COMPLETED:
        answer = answer_from(record)
        end = tokens.End(
            "",
            status,
            finish_reason=answer.finish_reason,
            finish_reasons=tuple(choice.engine_finish for choice in answer.choices),
            prompt_tokens=answer.usage.prompt_tokens,
            completion_tokens=answer.usage.completion_tokens,
        )
        if not answer.choices:
            return [tokens.Delta("", answer.text, answer.usage.completion_tokens), end]
        deltas: list[tokens.Event] = [
            tokens.Delta("", choice.text, 0, index, tuple(choice.logprobs or ()))
            for index, choice in enumerate(answer.choices)
        ]
        return [*deltas, end]
    code = record.error_code or ("cancelled" if status is JobStatus.CANCELLED else "failed")
    return [tokens.End("", status, error_code=code, error_message=record.error_message)]


def overdue_end() -> tokens.End:
    message = "the job did not finish within its deadline"
    return tokens.End("", JobStatus.FAILED, error_code=NO_RESULT, error_message=message)


async def follow(
    redis: AsyncRedis, job_id: str, *, generative: bool, after: str = "0-0"
) -> AsyncIterator[tokens.Event]:
    """The job's events from `after` (an entry id, as SSE's Last-Event-ID) to its end."""
    record = await read_record(redis, job_id)
    if record is None:
        yield tokens.End("", JobStatus.FAILED, error_code="not_found", error_message="no such job")
        return
    give_up_at = record.deadline_ms / 1000 + GRACE_S
    if not generative:
        async for event in _when_final(redis, job_id, give_up_at):
            yield event
        return
    async for event in _tokens(redis, job_id, after, give_up_at):
        yield event


async def _when_final(redis: AsyncRedis, job_id: str, give_up_at: float) -> AsyncIterator[tokens.Event]:
    key = done_key(job_id)
    while True:
        record = await read_record(redis, job_id)
        if record is not None and record.status.is_final:
            for event in end_of(record):
                yield event
            return
        if record is None or time.time() > give_up_at:
            yield overdue_end()
            return
        await redis.blmove(key, key, BLOCK_MS / 1000, "RIGHT", "LEFT")  # type: ignore[arg-type]


async def _tokens(
    redis: AsyncRedis, job_id: str, after: str, give_up_at: float
) -> AsyncIterator[tokens.Event]:
    key = tokens_key(job_id)
    last = after
    streamed = after != "0-0"
    while True:
        reply = await redis.xread({key: last}, count=READ_COUNT, block=BLOCK_MS)
        for _stream, entries in reply or ():
            for entry_id, entry in entries:
                last, streamed = entry_id, True
                event = tokens.parse(entry_id, entry)
                yield event
                if isinstance(event, tokens.End):
                    return
        if reply:
            continue
        record = await read_record(redis, job_id)
        if record is not None and record.status.is_final:
            async for event in _tail(redis, key, last, record, streamed):
                yield event
            return
        if record is None or time.time() > give_up_at:
            yield overdue_end()
            return


async def _tail(
    redis: AsyncRedis, key: str, last: str, record: JobRecord, streamed: bool
) -> AsyncIterator[tokens.Event]:
    """A final job whose stream holds no end: what is left in the stream, then the end its hash records
    (with its whole text, when nothing was ever streamed)."""
    tail = await redis.xread({key: last}, count=tokens.MAX_ENTRIES)
    for _stream, entries in tail or ():
        for entry_id, entry in entries:
            streamed = True
            yield tokens.parse(entry_id, entry)
    ended = end_of(record)
    for event in ended[-1:] if streamed else ended:
        yield event
