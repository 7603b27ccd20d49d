"""Fair shares of one front-door process's streams: admission is decided before anything is submitted.

Every open stream holds one of the process's Redis connections for its whole life, so the process
serves at most `SYNAPSE_MAX_STREAMS` streams at once (its Redis pool is sized from that number), and
one tenant at most `SYNAPSE_MAX_STREAMS_PER_TENANT` of them, so that a tenant holding its whole share
leaves the rest to the others. A route asks for a slot before it submits a job (`StreamSink.admit`):
a refused stream enqueued nothing, and its client retries after `Retry-After`. Routes run on the
server's threads and streams end on its event loop, hence the lock.
"""

from __future__ import annotations

import threading
from collections import Counter

from contract.settings import Settings
from frontdoor.errors import Problem

# A stream ends when its job does (seconds to minutes); a client that retries this often finds a freed
# slot soon without hammering the front door.
RETRY_AFTER_S = 2
# Connections of the streaming server's pool beyond one per stream: a stream uses one at a time, and
# these cover the commands of streams that are ending while new ones begin.
POOL_HEADROOM = 16


def pool_size(settings: Settings) -> int:
    """The streaming server's Redis connections: one per stream it may hold, and the headroom."""
    return settings.max_streams + POOL_HEADROOM


class StreamSlots:
    """Counts the streams each tenant holds in this process; refuses one past a limit."""

    def __init__(self, capacity: int, per_tenant: int) -> None:
        self.capacity = capacity
        self.per_tenant = per_tenant
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()

    @classmethod
    def of(cls, settings: Settings) -> StreamSlots:
        return cls(settings.max_streams, settings.max_streams_per_tenant)

    def take(self, tenant: str) -> Problem | None:
        """Takes a slot for the tenant (None), or answers why not: 429 past its share, 503 past the
        process's capacity."""
        retry = {"Retry-After": str(RETRY_AFTER_S)}
        with self._lock:
            if self._held[tenant] >= self.per_tenant:
                message = (
                    f"tenant {tenant!r} holds its {self.per_tenant} concurrent streams on this front "
                    f"door (SYNAPSE_MAX_STREAMS_PER_TENANT); nothing was queued; retry after one ends"
                )
                return Problem(429, "too_many_streams", message, headers=retry)
            if self.held() >= self.capacity:
                message = (
                    f"this front door serves {self.capacity} concurrent streams (SYNAPSE_MAX_STREAMS) "
                    f"and all are open; nothing was queued; retry"
                )
                return Problem(503, "streams_full", message, headers=retry)
            self._held[tenant] += 1
        return None

    def give_back(self, tenant: str) -> None:
        with self._lock:
            self._held[tenant] -= 1
            if self._held[tenant] <= 0:
                del self._held[tenant]

    def held(self, tenant: str | None = None) -> int:
        """Streams held: the tenant's, or the process's."""
        return self._held[tenant] if tenant is not None else sum(self._held.values())
