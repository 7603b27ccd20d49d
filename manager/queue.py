"""The manager's side of the job queue: reading streams through the consumer group and writing results.

Delivery is at least once. An entry stays in the group's pending list until its outcome is written;
a live manager renews its claim on what it holds (`touch`), so only entries of a manager that
stopped renewing become idle long enough for another manager to reclaim them. Every call moves a
whole batch in one round trip.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from redis.exceptions import ResponseError

from contract.jobs import Job, Outcome
from contract.keys import CONSUMER_GROUP, dead_letter_key, done_key, job_key, stream_key
from contract.redis_client import AsyncRedis


@dataclass(frozen=True, slots=True)
class Delivery:
    """One stream entry handed to this manager: the job, the entry id to acknowledge, the attempt.

    `alone`: the job was in a batch the model rejected, so it runs in a batch of its own next, and
    a poison prompt fails by itself.
    """

    entry_id: str
    job: Job
    attempt: int = 1
    alone: bool = False
    received_at: float = field(default_factory=time.monotonic)  # on this manager's clock: the batching window


# Counts every run of a job and names the manager and worker that ran it last (for operators and tests).
# Returns the positions of jobs whose client asked to cancel them before they started.
_MARK_RUNNING = """
local asked = {}
for i, key in ipairs(KEYS) do
  local status = redis.call('HGET', key, 'status')
  if status == 'QUEUED' or status == 'RUNNING' then
    redis.call('HINCRBY', key, 'runs', 1)
    redis.call('HSET', key, 'status', 'RUNNING', 'started_ms', ARGV[1], 'manager', ARGV[2], 'worker', ARGV[3])
    if redis.call('HEXISTS', key, 'cancel_requested') == 1 then
      asked[#asked + 1] = i
    end
  end
end
return asked
"""

# Check-and-set completion: a final job never changes again, even when its batch ran twice.
# KEYS: stream, dead-letter stream, then (job, done) per job.
# ARGV: ttl, n_jobs, then per job: dead flag, n_fields, field/value pairs; then entry ids to ack.
_COMPLETE = """
local ttl = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local a = 3
local written = 0
for j = 1, n do
  local jkey = KEYS[1 + 2 * j]
  local dkey = KEYS[2 + 2 * j]
  local dead = ARGV[a]
  local nf = tonumber(ARGV[a + 1])
  a = a + 2
  local status = redis.call('HGET', jkey, 'status')
  if status and status ~= 'COMPLETED' and status ~= 'FAILED' and status ~= 'CANCELLED' then
    for f = 0, nf - 1 do
      redis.call('HSET', jkey, ARGV[a + 2 * f], ARGV[a + 2 * f + 1])
    end
    redis.call('RPUSH', dkey, '1')
    redis.call('EXPIRE', dkey, ttl)
    if dead == '1' then
      local reason = redis.call('HMGET', jkey, 'id', 'error_code', 'error_message')
      redis.call('XADD', KEYS[2], '*', 'id', reason[1], 'error_code', reason[2], 'error_message', reason[3])
    end
    written = written + 1
  end
  a = a + 2 * nf
end
for e = a, #ARGV do
  redis.call('XACK', KEYS[1], '__GROUP__', ARGV[e])
  redis.call('XDEL', KEYS[1], ARGV[e])
end
return written
"""


class JobQueue:
    """One manager's view of the per-model streams."""

    def __init__(self, redis: AsyncRedis, consumer: str, job_ttl_s: int) -> None:
        self.redis = redis
        self.consumer = consumer
        self.job_ttl_s = job_ttl_s
        # redis-py types register_script for Redis alone; a RedisCluster's routes EVALSHA by the keys.
        self._mark_running = redis.register_script(_MARK_RUNNING)  # type: ignore[misc]
        self._complete = redis.register_script(_COMPLETE.replace("__GROUP__", CONSUMER_GROUP))  # type: ignore[misc]

    async def ensure_group(self, model: str) -> None:
        try:
            await self.redis.xgroup_create(stream_key(model), CONSUMER_GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def read(self, model: str, count: int, block_ms: int) -> list[Delivery]:
        """New entries for this consumer; blocks up to block_ms when there are none."""
        reply = await self.redis.xreadgroup(
            CONSUMER_GROUP, self.consumer, {stream_key(model): ">"}, count=count, block=block_ms
        )
        return [
            Delivery(entry_id, Job.from_stream(model, fields))
            for _stream, entries in reply or ()
            for entry_id, fields in entries
        ]

    async def reclaim(self, model: str, min_idle_ms: int, count: int = 512) -> list[Delivery]:
        """Takes over entries idle for min_idle_ms (their manager died), with their delivery counts."""
        key = stream_key(model)
        claimed: list[tuple[str, dict[str, str]]] = []
        vanished: list[str] = []
        cursor = "0-0"
        while True:
            reply = await self.redis.xautoclaim(
                key, CONSUMER_GROUP, self.consumer, min_idle_ms, cursor, count
            )
            cursor, entries = reply[0], reply[1]
            claimed += [(entry_id, fields) for entry_id, fields in entries if fields]
            vanished += list(reply[2]) if len(reply) > 2 else []
            if cursor == "0-0" or len(claimed) >= count:
                break
        if vanished:  # entries deleted while pending: nothing left to run
            await self.redis.xack(key, CONSUMER_GROUP, *vanished)
        if not claimed:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for entry_id, _ in claimed:
            pipe.xpending_range(key, CONSUMER_GROUP, min=entry_id, max=entry_id, count=1)
        pending = await pipe.execute()
        return [
            Delivery(
                entry_id,
                Job.from_stream(model, fields),
                attempt=int(info[0]["times_delivered"]) if info else 1,
            )
            for (entry_id, fields), info in zip(claimed, pending, strict=True)
        ]

    async def held(self, model: str, page: int = 1000) -> list[str]:
        """Every entry the group lists as delivered to this manager and not yet acknowledged."""
        held: list[str] = []
        start = "-"
        while True:
            rows = await self.redis.xpending_range(
                stream_key(model), CONSUMER_GROUP, min=start, max="+", count=page, consumername=self.consumer
            )
            held += [row["message_id"] for row in rows]
            if len(rows) < page:
                return held
            start = "(" + rows[-1]["message_id"]

    async def touch(self, model: str, entry_ids: Sequence[str]) -> None:
        """Renews this manager's claim: resets the entries' idle time without counting a delivery."""
        if entry_ids:
            await self.redis.xclaim(
                stream_key(model), CONSUMER_GROUP, self.consumer, 0, list(entry_ids), justid=True
            )

    async def release(self, model: str, entry_ids: Sequence[str], idle_ms: int) -> None:
        """Hands entries back on shutdown: marked idle for idle_ms, so another manager reclaims them now."""
        if entry_ids:
            await self.redis.xclaim(
                stream_key(model),
                CONSUMER_GROUP,
                self.consumer,
                0,
                list(entry_ids),
                idle=idle_ms,
                justid=True,
            )

    async def mark_running(self, jobs: Sequence[Job], started_ms: int, worker_id: str) -> set[str]:
        """Marks the jobs RUNNING; returns the ids of those whose client asked to cancel them."""
        asked = await self._mark_running(
            keys=[job_key(j.id) for j in jobs], args=[started_ms, self.consumer, worker_id]
        )
        return {jobs[int(i) - 1].id for i in asked or ()}

    async def complete(
        self,
        model: str,
        outcomes: Sequence[Outcome],
        entry_ids: Sequence[str],
        dead: frozenset[str] = frozenset(),
    ) -> int:
        """Writes outcomes of jobs not yet final, wakes their readers, acks the entries; returns writes.

        Jobs whose ids are in `dead` also go to the model's dead-letter stream.
        """
        keys = [stream_key(model), dead_letter_key(model)]
        args: list[str | int] = [self.job_ttl_s, len(outcomes)]
        for outcome in outcomes:
            keys += [job_key(outcome.job_id), done_key(outcome.job_id)]
            fields = outcome.hash_fields()
            args += ["1" if outcome.job_id in dead else "0", len(fields)]
            for name, value in fields.items():
                args += [name, value]
        args += list(entry_ids)
        return int(await self._complete(keys=keys, args=args))
