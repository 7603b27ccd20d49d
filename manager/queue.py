"""The manager's side of the job queue: reading streams through the consumer group, holding what it
read until it starts (`Waiting`), and writing results.

Delivery is at least once. An entry stays in the group's pending list until its outcome is written;
a live manager renews its claim on what it holds (`touch`), so only entries of a manager that
stopped renewing become idle long enough for another manager to reclaim them. Every call moves a
whole batch in one round trip.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from redis.exceptions import ResponseError
from redis.typing import StreamIdT

from contract.jobs import Job, Outcome, Priority, now_ms
from contract.keys import (
    CALLBACKS_KEY,
    CONSUMER_GROUP,
    COUNTS_KEY,
    dead_letter_key,
    done_key,
    inflight_key,
    job_key,
    stream_key,
    tokens_key,
)
from contract.redis_client import AsyncRedis
from manager.batching import BatchDecision, promoted

CLAIM_PAGE = 1000  # ids per XCLAIM: a renewal of a large buffer stays a set of bounded commands


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


class Waiting:
    """What this manager read and has not started: interactive jobs, with batch jobs promoted to go as
    such at their front (they are older), and batch jobs apart. A job is acked in its own priority's
    stream whichever queue held it."""

    def __init__(self) -> None:
        self.interactive: deque[Delivery] = deque()
        self.batch: deque[Delivery] = deque()

    def __bool__(self) -> bool:
        return bool(self.interactive or self.batch)

    def __iter__(self) -> Iterator[Delivery]:
        return itertools.chain(self.interactive, self.batch)

    @property
    def backlog(self) -> int:
        """Jobs of interactive priority: the latency budget's concern (promoted batch jobs are not)."""
        return sum(1 for d in self.interactive if d.job.priority is Priority.INTERACTIVE)

    def add(self, deliveries: Sequence[Delivery]) -> None:
        """New reads, at the back of their priority's queue."""
        self.interactive.extend(d for d in deliveries if d.job.priority is Priority.INTERACTIVE)
        self.batch.extend(d for d in deliveries if d.job.priority is Priority.BATCH)

    def requeue(self, deliveries: Sequence[Delivery]) -> None:
        """Back at the front of their priority's queue, in order: a retried or reclaimed job has waited."""
        for priority, waiting in ((Priority.INTERACTIVE, self.interactive), (Priority.BATCH, self.batch)):
            waiting.extendleft(reversed([d for d in deliveries if d.job.priority is priority]))

    def promote(self, now: int) -> bool:
        """Moves batch jobs past half their time to the deadline (`batching.promoted`, wall-clock ms) to
        the front of the interactive queue (behind jobs that run alone); returns whether any moved."""
        due = [d for d in self.batch if promoted(d.job.created_ms, d.job.deadline_ms, now)]
        if due:
            self.batch = deque(
                d for d in self.batch if not promoted(d.job.created_ms, d.job.deadline_ms, now)
            )
            # Behind the jobs that must run alone (a failed batch's suspects): never batched with them.
            lead = next((i for i, d in enumerate(self.interactive) if not d.alone), len(self.interactive))
            for offset, delivery in enumerate(due):
                self.interactive.insert(lead + offset, delivery)
        return bool(due)

    def take_overdue(self, now: int) -> list[Delivery]:
        """Removes and returns the jobs whose deadline (wall-clock ms) has passed."""
        overdue = [d for d in self if d.job.deadline_ms <= now]
        if overdue:
            self.interactive = deque(d for d in self.interactive if d.job.deadline_ms > now)
            self.batch = deque(d for d in self.batch if d.job.deadline_ms > now)
        return overdue

    def take(self, job_id: str) -> Delivery | None:
        """Removes and returns the job, if it waits here."""
        for waiting in (self.interactive, self.batch):
            found = next((d for d in waiting if d.job.id == job_id), None)
            if found is not None:
                waiting.remove(found)
                return found
        return None

    def cut(self, decision: BatchDecision) -> list[Delivery]:
        """The decision's rows, interactive first; a job marked `alone` (its batch failed) goes by itself.

        Sizes count rows (a text of an embedding job each; a job of any other model is one row): whole
        jobs are taken while they fit, and a job larger than a whole batch goes alone."""
        head = self.interactive if decision.take else self.batch
        if head[0].alone:
            return [head.popleft()]
        fill = 0 if decision.take and self.batch and self.batch[0].alone else decision.fill
        taken = _pop_rows(self.interactive, decision.take, alone_ok=True) if decision.take else []
        return taken + _pop_rows(self.batch, fill, alone_ok=not taken)


def head_rows(waiting: deque[Delivery], limit: int) -> int:
    """Rows a batch of at most `limit` rows cut from the head now would hold, as `_pop_rows` takes
    them; `limit` when it can grow no more (the next job does not fit: it waits for the batch after, or
    goes alone when first), so the batch goes at once rather than wait for rows that cannot join it."""
    used = 0
    for delivery in itertools.islice(waiting, limit):  # each job has a row at least
        if used + delivery.job.rows > limit:
            return limit
        used += delivery.job.rows
    return used


def _pop_rows(waiting: deque[Delivery], rows: int, *, alone_ok: bool) -> list[Delivery]:
    """Whole jobs from the head while their rows fit in `rows`; with alone_ok, a first job larger than
    that is taken alone (it goes as several requests)."""
    taken: list[Delivery] = []
    used = 0
    while waiting and used < rows:
        size = waiting[0].job.rows
        if used + size > rows and not (alone_ok and not taken):
            break
        taken.append(waiting.popleft())
        used += size
    return taken


# Counts every run of a job and names the manager and worker that ran it last (for operators and tests).
# Returns the positions of jobs not to run: their client asked to cancel them, or they ended already (the
# front door cancelled one this manager read before the announcement reached it).
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
  elseif status then
    asked[#asked + 1] = i
  end
end
return asked
"""

# Check-and-set completion: a final job never changes again, even when its batch ran twice. The job's end
# also leaves its tenant's in-flight set, counts once per tenant (and a cancellation once per model), makes
# its callback due, and starts the record's own lifetime (`ttl_s`, else the platform's job TTL).
# KEYS: interactive stream, batch stream, dead-letter stream, callbacks, counts, then (job, done, tenant's
# in-flight set, token stream) per job. ARGV: ttl, n_jobs, now_ms, model, notify-all (1: every COMPLETED
# or FAILED job's end is due, for the outcome topics), manager, then per job: dead flag, the worker of a
# run that mark-running missed (Redis was away; "" if none), n_fields, field/value pairs; then per entry
# to ack: its stream's position in KEYS (1 or 2) and its id. Returns the positions (from 1) of the jobs
# it wrote.
_COMPLETE = """
local ttl = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local a = 7
local written = {}
for j = 1, n do
  local jkey = KEYS[4 * j + 2]
  local dkey = KEYS[4 * j + 3]
  local ikey = KEYS[4 * j + 4]
  local dead = ARGV[a]
  local ran_on = ARGV[a + 1]
  local nf = tonumber(ARGV[a + 2])
  a = a + 3
  local status = redis.call('HGET', jkey, 'status')
  if status and status ~= 'COMPLETED' and status ~= 'FAILED' and status ~= 'CANCELLED' then
    if ran_on ~= '' then
      redis.call('HINCRBY', jkey, 'runs', 1)
      redis.call('HSET', jkey, 'manager', ARGV[6], 'worker', ran_on)
    end
    for f = 0, nf - 1 do
      redis.call('HSET', jkey, ARGV[a + 2 * f], ARGV[a + 2 * f + 1])
    end
    local asked = redis.call('HGET', jkey, 'cancel_requested')
    local now_status = redis.call('HGET', jkey, 'status')
    if asked and now_status == 'COMPLETED' then
      -- its client cancelled it while it ran and the announcement missed this manager: the result is dropped
      redis.call('HSET', jkey, 'status', 'CANCELLED', 'error_code', 'cancelled', 'error_message', asked)
      redis.call('HDEL', jkey, 'result', 'result_kind')
    elseif asked and now_status == 'CANCELLED' then
      -- the announcement carries only the job's id: the reason is the one its client gave
      redis.call('HSET', jkey, 'error_message', asked)
    end
    local job = redis.call('HMGET', jkey, 'id', 'tenant', 'ttl_s', 'callback', 'status')
    local keep = tonumber(job[3]) or ttl
    redis.call('EXPIRE', jkey, keep)
    redis.call('RPUSH', dkey, '1')
    redis.call('EXPIRE', dkey, keep)
    redis.call('EXPIRE', KEYS[4 * j + 5], keep)
    redis.call('ZREM', ikey, job[1])
    local ended = string.lower(job[5])
    redis.call('HINCRBY', KEYS[5], (job[2] or 'default') .. '|' .. ended, 1)
    if ended == 'cancelled' then
      redis.call('HINCRBY', KEYS[5], 'model|' .. ARGV[4] .. '|cancelled', 1)
    end
    if job[4] or (ARGV[5] == '1' and (ended == 'completed' or ended == 'failed')) then
      redis.call('ZADD', KEYS[4], 'NX', ARGV[3], job[1])
    end
    if dead == '1' then
      local reason = redis.call('HMGET', jkey, 'id', 'error_code', 'error_message')
      redis.call('XADD', KEYS[3], '*', 'id', reason[1], 'error_code', reason[2], 'error_message', reason[3])
    end
    written[#written + 1] = j
  end
  a = a + 2 * nf
end
for e = a, #ARGV, 2 do
  local stream = KEYS[tonumber(ARGV[e])]
  redis.call('XACK', stream, '__GROUP__', ARGV[e + 1])
  redis.call('XDEL', stream, ARGV[e + 1])
end
return written
"""


class JobQueue:
    """One manager's view of the per-model streams."""

    def __init__(self, redis: AsyncRedis, consumer: str, job_ttl_s: int, *, notify_all: bool = False) -> None:
        self.redis = redis
        self._notify_all = notify_all
        self.consumer = consumer
        self.job_ttl_s = job_ttl_s
        # redis-py types register_script for Redis alone; a RedisCluster's routes EVALSHA by the keys.
        self._mark_running = redis.register_script(_MARK_RUNNING)  # type: ignore[misc]
        self._complete = redis.register_script(_COMPLETE.replace("__GROUP__", CONSUMER_GROUP))  # type: ignore[misc]

    async def ensure_group(self, model: str) -> None:
        """The consumer group of each of the model's streams (one per priority, the same group name)."""
        for priority in Priority:
            try:
                await self.redis.xgroup_create(
                    stream_key(model, priority), CONSUMER_GROUP, id="0", mkstream=True
                )
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def read(
        self, model: str, count: int, block_ms: int, priorities: Sequence[Priority] = tuple(Priority)
    ) -> list[Delivery]:
        """New entries for this consumer, up to `count` from each named stream, interactive first, in
        one call; blocks up to block_ms when there are none."""
        reply = await self.redis.xreadgroup(
            CONSUMER_GROUP,
            self.consumer,
            {stream_key(model, p): ">" for p in priorities},
            count=count,
            block=block_ms,
        )
        return [
            Delivery(entry_id, Job.from_stream(model, fields))
            for _stream, entries in reply or ()
            for entry_id, fields in entries
        ]

    async def reclaim(self, model: str, min_idle_ms: int, count: int = 512) -> list[Delivery]:
        """Takes over entries idle for min_idle_ms (their manager died), with their delivery counts:
        up to `count` from each stream."""
        taken: list[tuple[str, str, dict[str, str]]] = []
        for priority in Priority:
            key = stream_key(model, priority)
            taken += [(key, *entry) for entry in await self._claim_idle(key, min_idle_ms, count)]
        if not taken:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for key, entry_id, _ in taken:
            pipe.xpending_range(key, CONSUMER_GROUP, min=entry_id, max=entry_id, count=1)
        pending = await pipe.execute()
        return [
            Delivery(
                entry_id,
                Job.from_stream(model, fields),
                attempt=int(info[0]["times_delivered"]) if info else 1,
            )
            for (_key, entry_id, fields), info in zip(taken, pending, strict=True)
        ]

    async def _claim_idle(self, key: str, min_idle_ms: int, count: int) -> list[tuple[str, dict[str, str]]]:
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
        return claimed

    async def held(self, model: str, page: int = 1000) -> dict[Priority, list[str]]:
        """Every entry the group lists as delivered to this manager and not yet acknowledged, by stream."""
        held: dict[Priority, list[str]] = {}
        for priority in Priority:
            ids = held[priority] = []
            start = "-"
            while True:
                rows = await self.redis.xpending_range(
                    stream_key(model, priority), CONSUMER_GROUP, min=start, max="+", count=page,
                    consumername=self.consumer,
                )  # fmt: skip
                ids += [row["message_id"] for row in rows]
                if len(rows) < page:
                    break
                start = "(" + rows[-1]["message_id"]
        return held

    async def touch(self, model: str, entries: Mapping[Priority, Sequence[str]]) -> None:
        """Renews this manager's claim: resets the entries' idle time without counting a delivery."""
        await self._claim(model, entries, idle_ms=None)

    async def release(self, model: str, entries: Mapping[Priority, Sequence[str]], idle_ms: int) -> None:
        """Hands entries back on shutdown: marked idle for idle_ms, so another manager reclaims them now."""
        await self._claim(model, entries, idle_ms)

    async def _claim(
        self, model: str, entries: Mapping[Priority, Sequence[str]], idle_ms: int | None
    ) -> None:
        """XCLAIM by this consumer, in one round trip of commands of CLAIM_PAGE ids each."""
        pipe = self.redis.pipeline(transaction=False)
        for priority, ids in entries.items():
            for start in range(0, len(ids), CLAIM_PAGE):
                page: list[StreamIdT] = list(ids[start : start + CLAIM_PAGE])
                key = stream_key(model, priority)
                pipe.xclaim(key, CONSUMER_GROUP, self.consumer, 0, page, idle=idle_ms, justid=True)
        if len(pipe):
            await pipe.execute()

    async def mark_running(self, jobs: Sequence[Job], started_ms: int, worker_id: str) -> set[str]:
        """Marks the jobs RUNNING; returns the ids of those not to run: cancelled, or already ended."""
        asked = await self._mark_running(
            keys=[job_key(j.id) for j in jobs], args=[started_ms, self.consumer, worker_id]
        )
        return {jobs[int(i) - 1].id for i in asked or ()}

    async def complete(
        self,
        model: str,
        outcomes: Sequence[Outcome],
        entries: Mapping[str, tuple[str, Job]],
        dead: frozenset[str] = frozenset(),
        unmarked: Mapping[str, str] | None = None,
    ) -> set[str]:
        """Writes outcomes of jobs not yet final, wakes their readers, acks the entries; returns the ids
        of the jobs it wrote (a job already final, say cancelled meanwhile, is not written again).

        `entries` gives each outcome's stream entry and job. Jobs whose ids are in `dead` also go to the
        model's dead-letter stream. `unmarked`: the worker of each job whose run mark_running could not
        record, recorded now.
        """
        unmarked = unmarked or {}
        jobs = [entries[o.job_id][1] for o in outcomes]
        keys = [
            stream_key(model, Priority.INTERACTIVE),
            stream_key(model, Priority.BATCH),
            dead_letter_key(model),
            CALLBACKS_KEY,
            COUNTS_KEY,
        ]
        args: list[str | int] = [
            self.job_ttl_s, len(outcomes), now_ms(), model, int(self._notify_all), self.consumer,
        ]  # fmt: skip
        for outcome, job in zip(outcomes, jobs, strict=True):
            keys += [job_key(job.id), done_key(job.id), inflight_key(job.tenant), tokens_key(job.id)]
            fields = outcome.hash_fields()
            dead_flag = "1" if outcome.job_id in dead else "0"
            args += [dead_flag, unmarked.get(outcome.job_id, ""), len(fields)]
            for name, value in fields.items():
                args += [name, value]
        for job in jobs:
            args += [2 if job.priority is Priority.BATCH else 1, entries[job.id][0]]
        written = await self._complete(keys=keys, args=args)
        return {outcomes[int(i) - 1].job_id for i in written or ()}
