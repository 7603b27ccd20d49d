"""Appends a generation's text to its job's token stream in Redis, from which the front door serves SSE.

Deltas of the same few milliseconds go as one entry; the first goes at once (it is the time to first
token). The order of the ends matters to readers (`frontdoor/token_stream.py`): the last deltas before
the outcome, the end entry after it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from contract import tokens
from contract.jobs import Job, JobStatus, Outcome
from contract.keys import tokens_key
from contract.redis_client import STORE_ERRORS, AsyncRedis
from manager import metrics

log = logging.getLogger(__name__)

FLUSH_S = 0.005  # deltas of the same few ms go to Redis as one entry


@dataclass(slots=True)
class _Pending:
    texts: list[str] = field(default_factory=list)
    tokens: int = 0
    logprobs: list[Any] = field(default_factory=list)


class TokenRelay:
    """Appends one job's deltas to its token stream, a group every FLUSH_S; records TTFT and ITL."""

    def __init__(self, redis: AsyncRedis, job: Job, model: str, ttl_s: int) -> None:
        self._redis = redis
        self._job = job
        self._model = model
        self._ttl_s = ttl_s
        self._key = tokens_key(job.id)
        self._pending: dict[int, _Pending] = {}  # by choice, since the last flush
        self._unsent: list[dict[str, str]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._last_at: float | None = None

    def add(self, index: int, text: str, count: int, logprobs: list[Any]) -> None:
        """A choice's new text, the tokens that made it and their log-probabilities (if asked for)."""
        now = time.time()
        last = self._last_at
        first = last is None
        if last is None:
            waited = max(0.0, now - self._job.created_ms / 1000)
            metrics.TIME_TO_FIRST_TOKEN.labels(self._model).observe(waited)
        elif count:
            gap = (now - last) / count
            for _ in range(min(count, 16)):
                metrics.INTER_TOKEN_LATENCY.labels(self._model).observe(gap)
        self._last_at = now
        metrics.OUTPUT_TOKENS.labels(self._model).inc(count)
        pending = self._pending.setdefault(index, _Pending())
        pending.texts.append(text)
        pending.tokens += count
        pending.logprobs += logprobs
        if self._flusher is None or self._flusher.done():
            # The first text goes at once (it is the time to first token); later ones in groups.
            self._flusher = asyncio.create_task(self._flush_soon(0.0 if first else FLUSH_S))

    async def _flush_soon(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        entries = self._take()
        try:
            await self._append(entries)
        except STORE_ERRORS as exc:  # kept for the next flush; the outcome is written anyway
            log.warning("job %s: appending tokens failed: %s", self._job.id, exc)
            self._unsent[:0] = entries

    def _take(self) -> list[dict[str, str]]:
        entries, self._unsent = self._unsent, []
        for index, pending in sorted(self._pending.items()):
            entries.append(
                tokens.delta_fields("".join(pending.texts), pending.tokens, index, pending.logprobs)
            )
        self._pending = {}
        return entries

    async def _append(self, entries: Sequence[dict[str, str]]) -> None:
        if not entries:
            return
        # All or nothing: a retried append never doubles text. `async with`: see WorkerRegistry.publish.
        async with self._redis.pipeline(transaction=True) as pipe:
            for fields in entries:
                pipe.xadd(self._key, fields, maxlen=tokens.MAX_ENTRIES, approximate=True)  # type: ignore[arg-type]
            pipe.expire(self._key, self._ttl_s)
            await pipe.execute()

    async def reset(self, reason: str) -> None:
        """A retry: readers learn that what was streamed before is void."""
        await self._append([tokens.reset_fields(reason)])

    async def flush(self) -> None:
        """The last deltas, before the outcome is written: a reader that finds the job final and no end
        entry (`frontdoor/token_stream.py`) then finds every delta. What cannot be written is kept."""
        if self._flusher is not None:
            await self._flusher  # never cancelled midway: its entries would be lost
        entries = self._take()
        try:
            await self._append(entries)
        except STORE_ERRORS as exc:
            log.warning("job %s: appending its last tokens failed: %s", self._job.id, exc)
            self._unsent = entries

    async def end(self, outcome: Outcome) -> None:
        """The end entry, after the outcome is written: a reader that sees it finds the job final. If
        some deltas never reached the stream, the whole text replaces them first, so that what was
        streamed still adds up to the result."""
        end = tokens.end_of(outcome)
        entries = [tokens.end_fields(end)]
        if self._unsent and outcome.status is JobStatus.COMPLETED:
            repair = tokens.delta_fields(outcome.text, outcome.completion_tokens)
            entries[:0] = [
                tokens.reset_fields("some of the text was lost on its way; here it is whole"),
                repair,
            ]
        try:
            await self._append(entries)
        except STORE_ERRORS as exc:  # readers fall back to the job's status
            log.warning("job %s: writing its token stream's end failed: %s", self._job.id, exc)
