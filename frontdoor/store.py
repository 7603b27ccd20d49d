"""The front door's Redis calls: submit a job, read it, wait for it. One round trip each."""

from __future__ import annotations

import redis

from contract.jobs import Job, JobStatus
from contract.keys import done_key, job_key, stream_key

# Accept a job only while its model's queue has room, atomically: a 202 is a promise to keep it.
# KEYS: job hash, stream. ARGV: ttl, max queue length, n hash fields, pairs, then the stream's pairs.
_SUBMIT = """
if redis.call('XLEN', KEYS[2]) >= tonumber(ARGV[2]) then
  return 0
end
local n = tonumber(ARGV[3])
local a = 4
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


class JobStore:
    def __init__(self, client: redis.Redis, job_ttl_s: int, max_queue_length: int) -> None:
        self._redis = client
        self._ttl_s = job_ttl_s
        self._max_queue_length = max_queue_length
        self._submit = client.register_script(_SUBMIT)

    def submit(self, job: Job) -> bool:
        """Writes the job hash and appends it to its model's stream in one atomic round trip.

        Returns False, having written nothing, when the model's queue is full.
        """
        fields = job.hash_fields()
        args: list[str | int] = [self._ttl_s, self._max_queue_length, len(fields)]
        for pair in (*fields.items(), *job.stream_fields().items()):
            args += pair
        return bool(self._submit(keys=[job_key(job.id), stream_key(job.model)], args=args))

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

    def ping(self) -> bool:
        return bool(self._redis.ping())
