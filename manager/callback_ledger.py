"""The callbacks zset and the job records it points at: what `manager/callbacks.py` reads and writes.

A due job is claimed by moving its score to a lease (ms): no other manager sees it due until the lease
ends, so managers never deliver the same attempt at once, and a manager killed mid-delivery leaves the job
to be claimed again. Each write that records a try checks that the lease is still the writer's.

A job's record expires `ttl_s` after the job ends, as little as a minute, while its callback may be retried
for an hour: each claim keeps the record past its lease, and each retry scheduled keeps it past that
retry's lease, never pulling an expiry in. So a retry always finds the record it delivers, no record
expires before its ttl, and a record done with its callbacks is left its own expiry (or the last one
these gave it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from contract.job_record import JobRecord, record_of
from contract.keys import CALLBACKS_KEY, job_key
from contract.redis_client import AsyncRedis

# How long past a lease a record is kept: time for another manager to claim the job if this one died.
KEEP_MARGIN_MS = 10_000

# Claims up to ARGV[3] ids due by ARGV[1] (ms), each moved to the lease score ARGV[2]. KEYS: callbacks.
_CLAIM = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(due) do
  redis.call('ZADD', KEYS[1], ARGV[2], id)
end
return due
"""

# Records one channel's try, if this manager still holds the job's lease (the score it claimed it with): a
# manager whose lease ran out never overwrites its successor's record. KEYS: callbacks, job. ARGV: id,
# lease, next ('': another channel of this claim is still out, keep the lease; '0': nothing left to do;
# else when the job is due again, ms), keep (ms the record must live at least; 0: leave its expiry), then
# field/value pairs. PEXPIRE GT only ever lengthens an expiry, and leaves a record without one alone.
# Returns 1 if written, 0 if the lease was lost, -1 if the record was gone (then the job is dropped: HSET
# would leave a stub that never expires).
_SETTLE = """
if tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1])) ~= tonumber(ARGV[2]) then
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return -1
end
if #ARGV > 4 then
  redis.call('HSET', KEYS[2], unpack(ARGV, 5))
end
if ARGV[4] ~= '0' then
  redis.call('PEXPIRE', KEYS[2], ARGV[4], 'GT')
end
if ARGV[3] == '0' then
  redis.call('ZREM', KEYS[1], ARGV[1])
elseif ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
return 1
"""

LEASE_LOST, RECORD_GONE = 0, -1  # what `record` returns besides 1 (written)


class CallbackLedger:
    """The callbacks zset's operations, each one atomic or one round trip for a whole claim."""

    def __init__(self, redis: AsyncRedis, lease_ms: int) -> None:
        self._redis = redis
        self.lease_ms = lease_ms
        # redis-py types register_script for Redis alone; a RedisCluster routes EVALSHA by the keys.
        self._claim = redis.register_script(_CLAIM)  # type: ignore[misc]
        self._settle = redis.register_script(_SETTLE)  # type: ignore[misc]

    async def claim(self, now: int, count: int) -> tuple[int, list[tuple[str, JobRecord | None]]]:
        """Up to count jobs due by now (ms), leased to this manager: the lease, and each job's id and record
        (None when gone). Each record is kept past the lease, so a delivery never outlives its record."""
        lease = now + self.lease_ms
        ids: list[str] = list(await self._claim(keys=[CALLBACKS_KEY], args=[now, lease, count]) or ())
        if not ids:
            return lease, []
        pipe = self._redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.pexpire(job_key(job_id), self.lease_ms + KEEP_MARGIN_MS, gt=True)
            pipe.hgetall(job_key(job_id))
        replies = await pipe.execute()
        return lease, [(job_id, record_of(fields)) for job_id, fields in zip(ids, replies[1::2], strict=True)]

    async def drop(self, ids: Sequence[str]) -> None:
        await self._redis.zrem(CALLBACKS_KEY, *ids)

    async def put_back(self, ids: Sequence[str], due: int) -> None:
        """Due again at `due` (ms), no try recorded: jobs just claimed and not started. XX: never re-adds a
        job another manager has finished meanwhile."""
        await self._redis.zadd(CALLBACKS_KEY, dict.fromkeys(ids, due), xx=True)

    async def record(
        self, job_id: str, lease: int, now: int, next_due: int | None, fields: Mapping[str, str]
    ) -> int:
        """Writes a channel's fields under the lease; next_due: None keeps the lease (a channel is still
        out), 0 ends the job's callbacks, else it is due then and its record is kept past that try."""
        keep = next_due - now + self.lease_ms + KEEP_MARGIN_MS if next_due else 0
        args: list[str | int] = [job_id, lease, "" if next_due is None else next_due, keep]
        for pair in fields.items():
            args += pair
        return int(await self._settle(keys=[CALLBACKS_KEY, job_key(job_id)], args=args))
