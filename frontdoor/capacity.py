"""Whether a synchronous `/v1` call can be served now, and waking the pool when it cannot.

From zero, AWS takes minutes to bring a worker (`synapse plan cold-start`), far past what a `/v1` call
may wait. A job enqueued then would only expire with its client gone, so the route answers 503 with
`Retry-After` instead, and leaves a wake (`keys.wake_key`) that the autoscaler counts as demand for
the model. Any READY worker is capacity: one that lacks the model loads it when the job arrives (the
dispatcher asks it). STARTING and STANDBY workers are not: they take no jobs yet.
"""

from __future__ import annotations

import time
from functools import cache

from contract.jobs import now_ms
from contract.keys import WORKERS_KEY, wake_key, worker_key
from contract.redis_client import SyncRedis
from contract.workers import WorkerState
from frontdoor.services import redis_client
from openai_api.errors import Problem

# A worker READY a moment ago still is: a positive answer is reused this long per process, so a busy
# front door reads the registry about once a second. A negative one is never reused: the wake must be
# left, and a worker that just came up must be seen.
READY_REUSE_S = 1.0
# The wake outlives a few autoscaler ticks and a change of leader (its lease is 10 s); each 503 renews it.
WAKE_TTL_MS = 60_000

# One round trip for the check and the wake. KEYS: the workers set, the model's wake key. ARGV: the
# worker-key prefix, the READY state, now (ms), the wake's TTL (ms). The registrations are read by names
# built from the set: they share its hash slot (the `{synapse}` tag), so this holds on a cluster too.
# Returns 1 if a READY worker is registered, else 0 having set the wake.
_READY_OR_WAKE = """
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('HGET', ARGV[1] .. id, 'state') == ARGV[2] then
    return 1
  end
end
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
return 0
"""


class CapacityCheck:
    """Asks Redis whether any worker is READY; shared by every thread of a process."""

    def __init__(self, client: SyncRedis) -> None:
        # redis-py types register_script for Redis alone; a RedisCluster routes EVALSHA by the keys.
        self._script = client.register_script(_READY_OR_WAKE)  # type: ignore[misc]
        self._ready_until = 0.0

    def ready_or_wake(self, model: str) -> bool:
        """True if a worker can take the model's job now; False having woken the pool for it."""
        if time.monotonic() < self._ready_until:
            return True
        keys = [WORKERS_KEY, wake_key(model)]
        args: list[str | int] = [worker_key(""), WorkerState.READY.value, now_ms(), WAKE_TTL_MS]
        ready = bool(self._script(keys=keys, args=args))
        if ready:  # threads may race here: the loser only costs one more round trip
            self._ready_until = time.monotonic() + READY_REUSE_S
        return ready


class CapacityStartingError(Exception):
    """No worker is READY: raised before a job is created, so nothing is stored (nor its idempotency
    record: a retry with the same key is a new attempt)."""

    def __init__(self, model: str) -> None:
        super().__init__(f"no worker is ready for {model!r} yet")
        self.model = model


def starting_problem(model: str, retry_after_s: int) -> Problem:
    """The 503 a `/v1` call gets while the pool starts from zero: retry once a worker may be up."""
    message = (
        f"no worker is ready for {model!r} yet: capacity is starting from zero (minutes on AWS); "
        f"nothing was queued; retry after {retry_after_s} s, or submit to POST /async-infer, which waits"
    )
    return Problem(503, "capacity_starting", message, headers={"Retry-After": str(retry_after_s)})


@cache
def capacity() -> CapacityCheck:
    return CapacityCheck(redis_client())


def require_capacity(model: str) -> None:
    """Raises CapacityStartingError, having woken the pool, when no worker is READY."""
    if not capacity().ready_or_wake(model):
        raise CapacityStartingError(model)
