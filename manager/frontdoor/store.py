"""The front door's Redis calls: submit a job, read it, wait for it. One round trip each."""

from __future__ import annotations

import redis

from manager.jobs import Job, JobStatus, done_key, job_key, stream_key


class JobStore:
    def __init__(self, client: redis.Redis, job_ttl_s: int) -> None:
        self._redis = client
        self._ttl_s = job_ttl_s

    def submit(self, job: Job) -> None:
        """Writes the job hash and appends it to its model's stream in one atomic round trip."""
        pipe = self._redis.pipeline(transaction=True)
        pipe.hset(job_key(job.id), mapping=job.hash_fields())
        pipe.expire(job_key(job.id), self._ttl_s)
        pipe.xadd(stream_key(job.model), dict(job.stream_fields()))  # type: ignore[arg-type]
        pipe.execute()

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
