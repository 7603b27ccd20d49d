"""Where a job's stream resumes for a client's `Last-Event-ID`.

SSE clients send back the last id they saw; a client may also send any id at all. Only an id this
job's token stream holds resumes after it: an id that is malformed, past Redis's 64-bit entry ids, or
one the stream never sent (or has trimmed) starts the stream from its beginning. Resuming after an
unknown id would read nothing, and a client that gets an empty stream reconnects with the same id
for ever.
"""

from __future__ import annotations

from collections.abc import Sequence

from contract import tokens
from contract.keys import tokens_key
from contract.redis_client import AsyncRedis

MAX_ID_PART = 2**64 - 1  # each half of a stream entry id is an unsigned 64-bit integer in Redis


def entry_id_of(last_event_id: str | None) -> str | None:
    """The id as a stream entry id Redis can take, or None."""
    position = tokens.position_after(last_event_id)
    if position == tokens.START:
        return None
    millis, sequence = position.split("-")
    return position if max(int(millis), int(sequence)) <= MAX_ID_PART else None


async def resume_after(redis: AsyncRedis, job_id: str, last_event_id: str | None) -> str:
    """The entry id to read after: the client's, when the job's stream holds it; else the start."""
    entry_id = entry_id_of(last_event_id)
    if entry_id is None:
        return tokens.START
    found = await redis.xrange(tokens_key(job_id), min=entry_id, max=entry_id, count=1)
    return entry_id if found else tokens.START


def events_after(events: Sequence[tokens.Event], last_event_id: str | None) -> Sequence[tokens.Event]:
    """The events after the one the client last saw; all of them when it saw none of these."""
    ids = [event.entry_id for event in events]
    if last_event_id and last_event_id in ids:
        return events[ids.index(last_event_id) + 1 :]
    return events
