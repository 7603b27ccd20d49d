"""The front door's Redis calls: submit, read, wait for, cancel and list jobs. One round trip each (a
listing: one per page of the index)."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from redis.exceptions import NoScriptError

from contract import tokens
from contract.job_record import SUMMARY_FIELDS, JobRecord, parse_status, record_of
from contract.jobs import MAX_TIMEOUT_MS, Job, JobStatus, now_ms
from contract.keys import (
    CALLBACKS_KEY,
    CANCEL_CHANNEL,
    COUNTS_KEY,
    MAX_LISTED_JOBS,
    done_key,
    inflight_key,
    job_key,
    stream_key,
    tenant_jobs_key,
    tokens_key,
)
from contract.redis_client import SyncRedis

# Accept a job only while its model's queue has room and its tenant is under its in-flight quota, atomically:
# a 202 is a promise to keep it. The job joins its tenant's index (GET /jobs) and in-flight set (scored by
# its deadline plus a margin: a job that never ended cannot hold the quota forever), and is counted.
# KEYS: job hash, stream, tenant's index, tenant's in-flight set, counts.
# ARGV: ttl, max queue length, now ms, in-flight quota (0: none), how long the tenant's sets are kept (s: the
# longest a record of theirs can live), index member, oldest index member kept, index cap, in-flight score,
# tenant, job id, n hash fields, their pairs, the stream's pairs.
# Returns 1, 0 (queue full) or -1 (over the in-flight quota).
_SUBMIT = """
if redis.call('XLEN', KEYS[2]) >= tonumber(ARGV[2]) then
  return 0
end
local quota = tonumber(ARGV[4])
if quota > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[3])
  if redis.call('ZCARD', KEYS[4]) >= quota then
    return -1
  end
end
local n = tonumber(ARGV[12])
local a = 13
for f = 0, n - 1 do
  redis.call('HSET', KEYS[1], ARGV[a + 2 * f], ARGV[a + 2 * f + 1])
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
local entry = {}
for i = a + 2 * n, #ARGV do
  entry[#entry + 1] = ARGV[i]
end
redis.call('HSET', KEYS[1], 'entry', redis.call('XADD', KEYS[2], '*', unpack(entry)))
redis.call('ZADD', KEYS[3], 0, ARGV[6])
redis.call('ZREMRANGEBYLEX', KEYS[3], '-', '(' .. ARGV[7])
local over = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[8])
if over > 0 then
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, over - 1)
end
redis.call('EXPIRE', KEYS[3], tonumber(ARGV[5]))
redis.call('ZADD', KEYS[4], tonumber(ARGV[9]), ARGV[11])
redis.call('EXPIRE', KEYS[4], tonumber(ARGV[5]))
redis.call('HINCRBY', KEYS[5], ARGV[10] .. '|submitted', 1)
return 1
"""

# A client asked to stop a job. A QUEUED one ends CANCELLED here and now: out of its stream (a manager that
# read it already drops it when the announcement reaches it), its readers woken, its quota freed, its
# callback due. A RUNNING one is marked (a manager that starts it later sees it) and announced to the
# managers: the one running it stops it. KEYS: job, its stream, done-list, tenant's in-flight set,
# callbacks, counts, token stream. ARGV: now ms, reason, channel, job id, model, tenant, default ttl.
# Returns the status the job had when asked (QUEUED: it is CANCELLED now), or MISSING.
_CANCEL = """
local job = redis.call('HMGET', KEYS[1], 'status', 'entry', 'ttl_s', 'callback')
local status = job[1]
if not status then
  return 'MISSING'
end
if status == 'RUNNING' then
  redis.call('HSET', KEYS[1], 'cancel_requested', ARGV[2])
  redis.call('PUBLISH', ARGV[3], ARGV[4])
  return status
end
if status ~= 'QUEUED' then
  return status
end
redis.call('HSET', KEYS[1], 'status', 'CANCELLED', 'started_ms', ARGV[1], 'completed_ms', ARGV[1],
  'batch_size', '0', 'error_code', 'cancelled', 'error_message', ARGV[2])
if job[2] then
  redis.call('XDEL', KEYS[2], job[2])
end
local keep = tonumber(job[3]) or tonumber(ARGV[7])
redis.call('EXPIRE', KEYS[1], keep)
redis.call('RPUSH', KEYS[3], '1')
redis.call('EXPIRE', KEYS[3], keep)
redis.call('EXPIRE', KEYS[7], keep)
redis.call('ZREM', KEYS[4], ARGV[4])
if job[4] then
  redis.call('ZADD', KEYS[5], 'NX', ARGV[1], ARGV[4])
end
redis.call('HINCRBY', KEYS[6], ARGV[6] .. '|cancelled', 1)
redis.call('HINCRBY', KEYS[6], 'model|' .. ARGV[5] .. '|cancelled', 1)
redis.call('PUBLISH', ARGV[3], ARGV[4])
return status
"""

_LINK_RETRY = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'retried_by', ARGV[1])
end
"""

# How long past its deadline a job still counts against its tenant's in-flight quota: long enough for any
# manager to take over and fail an overdue job (docs/guarantees.md). Past it, a job still not final has
# lost its record, and holding its place would shrink the tenant's quota for ever.
QUOTA_HOLD_AFTER_DEADLINE_MS = 120_000
LIST_PAGE_SCAN = 4  # GET /jobs with a filter reads up to this many pages of the index per call


def index_member(created_ms: int, job_id: str) -> str:
    """Sorts by creation time, then id: a total order, so a cursor never skips or repeats a job."""
    return f"{created_ms:013d}|{job_id}"


class QueueFullError(Exception):
    """The model's queue holds its maximum; nothing was stored."""

    def __init__(self, model: str) -> None:
        super().__init__(f"the queue for {model} is full; retry later")
        self.model = model


class Written(StrEnum):
    """What became of one job of `JobStore.submit_many`."""

    YES = "written"
    QUEUE_FULL = "queue_full"  # its model's queue is full: nothing written
    OVER_QUOTA = "over_quota"  # its tenant has its quota of jobs in flight: nothing written


WRITTEN_BY_REPLY = {1: Written.YES, 0: Written.QUEUE_FULL, -1: Written.OVER_QUOTA}  # the submit script's


class QuotaExceededError(Exception):
    """The tenant has its quota of jobs in flight; nothing was stored."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"your jobs in flight are at your quota of {limit}; retry when one ends")
        self.limit = limit


class JobStore:
    def __init__(self, client: SyncRedis, job_ttl_s: int, max_queue_length: int) -> None:
        self._redis = client
        self._ttl_s = job_ttl_s
        self._max_queue_length = max_queue_length
        # redis-py types register_script for Redis alone; a RedisCluster's routes EVALSHA by the keys.
        self._submit = client.register_script(_SUBMIT)  # type: ignore[misc]
        self._cancel = client.register_script(_CANCEL)  # type: ignore[misc]
        self._link = client.register_script(_LINK_RETRY)  # type: ignore[misc]

    def submit(self, job: Job, max_inflight: int = 0) -> bool:
        """Writes the job hash, appends it to its model's stream and indexes it, in one atomic round trip.

        Returns False, having written nothing, when the model's queue is full; raises
        QuotaExceededError, having written nothing, when its tenant has max_inflight jobs not yet final
        (0: no quota).
        """
        written = int(self._submit(*self._submit_call(job, max_inflight)))
        if written == -1:
            raise QuotaExceededError(max_inflight)
        return written == 1

    def submit_many(self, jobs: Sequence[Job], max_inflight: int = 0) -> list[Written]:
        """Each job submitted as `submit` does, all in one round trip (a pipeline of the same script, each
        job still atomic on its own): the Batch API's lines, a chunk at a time. What became of each, in
        order; a job refused leaves the ones after it to be tried all the same."""
        if not jobs:
            return []
        pipe = self._redis.pipeline(transaction=False)
        for job in jobs:
            keys, args = self._submit_call(job, max_inflight)
            # EVALSHA through execute_command: redis-py's cluster pipeline blocks its evalsha method only
            # for the script loading it cannot do, which NoScriptError below does instead; every key
            # shares one slot (contract/keys.py), so the pipeline goes to one node.
            pipe.execute_command("EVALSHA", self._submit.sha, len(keys), *keys, *args)
        outcomes: list[Written] = []
        for job, reply in zip(jobs, pipe.execute(raise_on_error=False), strict=True):
            written = reply
            if isinstance(reply, NoScriptError):  # a Redis that restarted since: this call loads it
                written = self._submit(*self._submit_call(job, max_inflight))
            elif isinstance(reply, Exception):
                raise reply
            outcomes.append(WRITTEN_BY_REPLY[int(written)])
        return outcomes

    def _submit_call(self, job: Job, max_inflight: int) -> tuple[list[str], list[str | int]]:
        """The submit script's keys and arguments for the job."""
        fields = job.hash_fields()
        # A record lives up to its deadline (at most MAX_TIMEOUT_MS), the takeover margin and its ttl.
        kept_s = self._ttl_s + (MAX_TIMEOUT_MS + QUOTA_HOLD_AFTER_DEADLINE_MS) // 1000
        oldest_kept = now_ms() - kept_s * 1000
        args: list[str | int] = [
            self._ttl_s, self._max_queue_length, now_ms(), max_inflight, kept_s,
            index_member(job.created_ms, job.id), index_member(oldest_kept, ""), MAX_LISTED_JOBS,
            job.deadline_ms + QUOTA_HOLD_AFTER_DEADLINE_MS, job.tenant, job.id, len(fields),
        ]  # fmt: skip
        for pair in (*fields.items(), *job.stream_fields().items()):
            args += pair
        keys = [
            job_key(job.id), stream_key(job.model, job.priority), tenant_jobs_key(job.tenant),
            inflight_key(job.tenant), COUNTS_KEY,
        ]  # fmt: skip
        return keys, args

    def cancel(self, record: JobRecord, reason: str) -> JobStatus | None:
        """Stops the job. Returns the status it had when asked: QUEUED (it is CANCELLED now), RUNNING
        (its manager stops it), or a final one (nothing changed); None if gone."""
        job_id, tenant = record.id, record.tenant
        keys = [
            job_key(job_id), stream_key(record.model, record.priority),
            done_key(job_id), inflight_key(tenant), CALLBACKS_KEY, COUNTS_KEY, tokens_key(job_id),
        ]  # fmt: skip
        args: list[str | int] = [now_ms(), reason, CANCEL_CHANNEL, job_id, record.model, tenant, self._ttl_s]
        status = str(self._cancel(keys=keys, args=args))
        return parse_status("" if status == "MISSING" else status)

    def cancel_by_id(self, job_id: str, reason: str) -> JobStatus | None:
        """`cancel` for a job known by id alone (a /v1 client that went away)."""
        record = self.get(job_id)
        return None if record is None else self.cancel(record, reason)

    def link_retry(self, job_id: str, retry_id: str) -> None:
        """Points a job at the job that retries it (shown as `retriedBy`), if its record still exists: a
        field written to an expired record would make a hash that never expires."""
        self._link(keys=[job_key(job_id)], args=[retry_id])

    def list_jobs(
        self, tenant: str, *, limit: int, after: str | None, status: str | None, model: str | None
    ) -> tuple[list[JobRecord], str | None]:
        """A tenant's jobs, newest first, from its index: up to `limit` that match the filters, and the
        index member to continue after (None at the end). Never a scan of the keyspace: a filtered call
        reads at most LIST_PAGE_SCAN pages of the index and may return fewer than `limit` with a cursor."""
        key = tenant_jobs_key(tenant)
        found: list[JobRecord] = []
        start = "(" + after if after else "+"
        for _ in range(LIST_PAGE_SCAN):
            members: list[str] = self._redis.zrange(  # type: ignore[assignment]
                key, start, "-", desc=True, bylex=True, offset=0, num=limit
            )
            if not members:
                return found, None
            pipe = self._redis.pipeline(transaction=False)
            for member in members:
                pipe.hmget(job_key(member.split("|", 1)[1]), list(SUMMARY_FIELDS))
            rows: list[list[str | None]] = pipe.execute()
            for member, row in zip(members, rows, strict=True):
                start = "(" + member
                fields = {name: value for name, value in zip(SUMMARY_FIELDS, row, strict=True) if value}
                record = record_of(fields)  # None: an expired job, or a stray field on no job
                if (
                    record is not None
                    and (status is None or record.status == status)
                    and (model is None or record.model == model)
                ):
                    found.append(record)
                    if len(found) == limit:
                        return found, member
            if len(members) < limit:
                return found, None
        return found, start[1:]

    def get(self, job_id: str) -> JobRecord | None:
        fields: dict[str, str] = self._redis.hgetall(job_key(job_id))  # type: ignore[assignment]
        return record_of(fields)

    def job(self, job_id: str) -> Job | None:
        """The job as it was submitted (its input, options and callback): what a retry resubmits."""
        fields: dict[str, str] = self._redis.hgetall(job_key(job_id))  # type: ignore[assignment]
        return Job.from_hash(fields) if fields.get("status") else None

    def get_many(self, job_ids: Sequence[str]) -> list[JobRecord | None]:
        """Each job's record (None: no such job), in one round trip however many there are."""
        pipe = self._redis.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hgetall(job_key(job_id))
        return [record_of(fields) for fields in pipe.execute()]

    def wait(self, job_id: str, timeout_s: float, read: JobRecord | None = None) -> JobRecord | None:
        """The job once final, or as it is after timeout_s; blocks on its done-list, never polls.
        `read`: the job's record as the caller just read it (no second read before the wait)."""
        record = read or self.get(job_id)
        if record is None or timeout_s <= 0 or record.status.is_final:
            return record
        # Moving the element onto the same list leaves it there for every other reader of this job.
        key = done_key(job_id)
        # Redis takes a fractional timeout; redis-py's stub says int.
        if self._redis.blmove(key, key, timeout_s, "RIGHT", "LEFT") is None:  # type: ignore[arg-type]
            return record
        return self.get(job_id)

    def delete(self, record: JobRecord) -> None:
        """Forgets a final job: its record, its token stream, its done-list and its place in the tenant's
        index (DELETE /v1/responses/{id}); one transaction, since every key shares the prefix's slot."""
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(job_key(record.id), tokens_key(record.id), done_key(record.id))
        pipe.zrem(tenant_jobs_key(record.tenant), index_member(record.created_ms, record.id))
        pipe.execute()

    def token_events(self, job_id: str) -> list[tokens.Event]:
        """The job's token stream as it is now (frontdoor/resume.py picks where a reader resumes)."""
        entries = self._redis.xrange(tokens_key(job_id))
        return [tokens.parse(entry_id, fields) for entry_id, fields in entries]  # type: ignore[union-attr]

    def ping(self) -> bool:
        return bool(self._redis.ping())
