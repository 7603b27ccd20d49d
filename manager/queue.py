"""The manager's side of the job queue: reading streams through the consumer group and writing results.

Every call moves a whole batch in one round trip: one XREADGROUP to read, one script to mark a batch
RUNNING, one script to write its outcomes, wake the long-pollers and acknowledge the entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from manager.jobs import CONSUMER_GROUP, Job, Outcome, done_key, job_key, stream_key


@dataclass(frozen=True, slots=True)
class Delivery:
    """One stream entry handed to this manager: the job and the entry id to acknowledge."""

    entry_id: str
    job: Job


# Only a QUEUED job becomes RUNNING: a job already final (a redelivered entry) stays as it is.
_MARK_RUNNING = """
for i, key in ipairs(KEYS) do
  if redis.call('HGET', key, 'status') == 'QUEUED' then
    redis.call('HSET', key, 'status', 'RUNNING', 'started_ms', ARGV[1])
  end
end
return 0
"""

# Check-and-set completion: a final job never changes again, even when its batch ran twice.
# KEYS: stream, then (job, done) per job. ARGV: ttl, n_jobs, then per job n_fields and field/value
# pairs, then the stream entry ids to acknowledge and delete.
_COMPLETE = """
local ttl = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local a = 3
local written = 0
for j = 1, n do
  local jkey = KEYS[2 * j]
  local dkey = KEYS[2 * j + 1]
  local nf = tonumber(ARGV[a])
  a = a + 1
  local status = redis.call('HGET', jkey, 'status')
  if status and status ~= 'COMPLETED' and status ~= 'FAILED' then
    for f = 0, nf - 1 do
      redis.call('HSET', jkey, ARGV[a + 2 * f], ARGV[a + 2 * f + 1])
    end
    redis.call('RPUSH', dkey, '1')
    redis.call('EXPIRE', dkey, ttl)
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

    def __init__(self, redis: aioredis.Redis, consumer: str, job_ttl_s: int) -> None:
        self._redis = redis
        self.consumer = consumer
        self._job_ttl_s = job_ttl_s
        self._mark_running = redis.register_script(_MARK_RUNNING)
        self._complete = redis.register_script(_COMPLETE.replace("__GROUP__", CONSUMER_GROUP))

    async def ensure_group(self, model: str) -> None:
        try:
            await self._redis.xgroup_create(stream_key(model), CONSUMER_GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def read(self, model: str, count: int, block_ms: int) -> list[Delivery]:
        """New entries for this consumer; blocks up to block_ms when there are none."""
        reply = await self._redis.xreadgroup(
            CONSUMER_GROUP, self.consumer, {stream_key(model): ">"}, count=count, block=block_ms
        )
        deliveries: list[Delivery] = []
        for _stream, entries in reply or ():
            for entry_id, fields in entries:
                deliveries.append(Delivery(entry_id, Job.from_stream(model, fields)))
        return deliveries

    async def mark_running(self, jobs: Sequence[Job], started_ms: int) -> None:
        await self._mark_running(keys=[job_key(j.id) for j in jobs], args=[started_ms])

    async def complete(self, model: str, outcomes: Sequence[Outcome], entry_ids: Sequence[str]) -> int:
        """Writes outcomes of jobs not yet final, wakes their readers, acks the entries; returns writes."""
        keys = [stream_key(model)]
        args: list[str | int] = [self._job_ttl_s, len(outcomes)]
        for outcome in outcomes:
            keys += [job_key(outcome.job_id), done_key(outcome.job_id)]
            fields = outcome.hash_fields()
            args.append(len(fields))
            for name, value in fields.items():
                args += [name, value]
        args += list(entry_ids)
        return int(await self._complete(keys=keys, args=args))
