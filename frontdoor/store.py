"""The front door's Redis calls: submit a job, read it, wait for it. One round trip each."""

from __future__ import annotations

from contract import tokens
from contract.jobs import Job, JobStatus
from contract.keys import CANCEL_CHANNEL, done_key, job_key, limits_key, stream_key, tokens_key
from contract.redis_client import SyncRedis

# Accept a job only while its model's queue has room and the model can produce its max_tokens, atomically:
# a 202 is a promise to keep it. A generative model's context comes from its Triton config (the manager
# publishes it); unknown until a worker first loaded the model, and then the engine refuses the job.
# KEYS: job hash, stream, model limits. ARGV: ttl, max queue length, max_tokens, n hash fields, pairs,
# then the stream's pairs. Returns 1, 0 (queue full) or -L (max_tokens over the context L allows).
_SUBMIT = """
local context = tonumber(redis.call('HGET', KEYS[3], 'max_model_len'))
if context and tonumber(ARGV[3]) > context - 1 then
  return -context
end
if redis.call('XLEN', KEYS[2]) >= tonumber(ARGV[2]) then
  return 0
end
local n = tonumber(ARGV[4])
local a = 5
for f = 0, n - 1 do
  redis.call('HSET', KEYS[1], ARGV[a + 2 * f], ARGV[a + 2 * f + 1])
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
local entry = {}
for i = a + 2 * n, #ARGV do
  entry[#entry + 1] = ARGV[i]
end
redis.call('XADD', KEYS[2], '*', unpack(entry))
return 1
"""


class QueueFullError(Exception):
    """The model's queue holds its maximum; nothing was stored."""

    def __init__(self, model: str) -> None:
        super().__init__(f"the queue for {model} is full; retry later")
        self.model = model


# A client asked to stop a job that is not final yet: marked on the job (a manager that starts it later
# sees it) and announced to the managers (the one running it stops it now). KEYS: job. ARGV: reason.
_CANCEL = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status or (status ~= 'QUEUED' and status ~= 'RUNNING') then
  return 0
end
redis.call('HSET', KEYS[1], 'cancel_requested', ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
"""


class TooManyTokensError(Exception):
    """max_tokens is over what the model can produce (its context less one prompt token)."""

    def __init__(self, model: str, max_tokens: int, context: int) -> None:
        super().__init__(
            f"max_tokens {max_tokens} is over the limit of {context - 1} for {model} "
            f"(its context holds {context} tokens, prompt included)"
        )


class JobStore:
    def __init__(self, client: SyncRedis, job_ttl_s: int, max_queue_length: int) -> None:
        self._redis = client
        self._ttl_s = job_ttl_s
        self._max_queue_length = max_queue_length
        # redis-py types register_script for Redis alone; a RedisCluster's routes EVALSHA by the keys.
        self._submit = client.register_script(_SUBMIT)  # type: ignore[misc]
        self._cancel = client.register_script(_CANCEL)  # type: ignore[misc]

    def submit(self, job: Job) -> bool:
        """Writes the job hash and appends it to its model's stream in one atomic round trip.

        Returns False, having written nothing, when the model's queue is full; raises
        TooManyTokensError, having written nothing, when the model cannot produce max_tokens.
        """
        fields = job.hash_fields()
        args: list[str | int] = [self._ttl_s, self._max_queue_length, job.max_tokens, len(fields)]
        for pair in (*fields.items(), *job.stream_fields().items()):
            args += pair
        keys = [job_key(job.id), stream_key(job.model), limits_key(job.model)]
        written = int(self._submit(keys=keys, args=args))
        if written < 0:
            raise TooManyTokensError(job.model, job.max_tokens, -written)
        return written == 1

    def cancel(self, job_id: str, reason: str) -> bool:
        """Asks the managers to stop a job; False if it is already final or unknown."""
        return bool(self._cancel(keys=[job_key(job_id)], args=[reason, CANCEL_CHANNEL, job_id]))

    def get(self, job_id: str) -> dict[str, str] | None:
        fields: dict[str, str] = self._redis.hgetall(job_key(job_id))  # type: ignore[assignment]
        return fields or None

    def wait(self, job_id: str, timeout_s: float) -> dict[str, str] | None:
        """The job once final, or as it is after timeout_s; blocks on its done-list, never polls."""
        fields = self.get(job_id)
        if fields is None or timeout_s <= 0 or JobStatus(fields["status"]).is_final:
            return fields
        # Moving the element onto the same list leaves it there for every other reader of this job.
        key = done_key(job_id)
        # Redis takes a fractional timeout; redis-py's stub says int.
        if self._redis.blmove(key, key, timeout_s, "RIGHT", "LEFT") is None:  # type: ignore[arg-type]
            return fields
        return self.get(job_id)

    def token_events(self, job_id: str, after: str = "0-0") -> list[tokens.Event]:
        """The job's token stream after an entry id, as it is now."""
        entries = self._redis.xrange(tokens_key(job_id), min=f"({after}" if after != "0-0" else "-")
        return [tokens.parse(entry_id, fields) for entry_id, fields in entries]  # type: ignore[union-attr]

    def ping(self) -> bool:
        return bool(self._redis.ping())
