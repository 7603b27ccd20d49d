"""Fair shares of one front-door process's streams: admission is decided before anything is submitted.

Every open stream holds one of the process's Redis connections for its whole life, so the process
serves at most `SYNAPSE_MAX_STREAMS` streams at once (its Redis pool is sized from that number), and
one tenant at most `SYNAPSE_MAX_STREAMS_PER_TENANT` of them, so that a tenant holding its whole share
leaves the rest to the others. A route asks for a slot before it submits a job (`StreamSink.admit`):
a refused stream enqueued nothing, and its client retries after `Retry-After`. Routes run on the
server's threads and streams end on its event loop (`frontdoor.shares` counts).
"""

from __future__ import annotations

from contract.settings import Settings
from frontdoor.shares import Refusals, Shares
from openai_api.errors import Problem

# A stream ends when its job does (seconds to minutes); a client that retries this often finds a freed
# slot soon without hammering the front door.
RETRY_AFTER_S = 2
# Connections of the streaming server's pool beyond one per stream: a stream uses one at a time, and
# these cover the commands of streams that are ending while new ones begin.
POOL_HEADROOM = 16


def pool_size(settings: Settings) -> int:
    """The streaming server's Redis connections: one per stream it may hold, and the headroom."""
    return settings.max_streams + POOL_HEADROOM


def _too_many_streams(tenant: str, share: int) -> Problem:
    message = (
        f"tenant {tenant!r} holds its {share} concurrent streams on this front door "
        f"(SYNAPSE_MAX_STREAMS_PER_TENANT); nothing was queued; retry after one ends"
    )
    return Problem(429, "too_many_streams", message, headers={"Retry-After": str(RETRY_AFTER_S)})


def _streams_full(capacity: int) -> Problem:
    message = (
        f"this front door serves {capacity} concurrent streams (SYNAPSE_MAX_STREAMS) and all are open; "
        f"nothing was queued; retry"
    )
    return Problem(503, "streams_full", message, headers={"Retry-After": str(RETRY_AFTER_S)})


class StreamSlots(Shares):
    """The streams each tenant holds in this process."""

    def __init__(self, capacity: int, per_tenant: int) -> None:
        super().__init__(capacity, per_tenant, Refusals(_streams_full, _too_many_streams))

    @classmethod
    def of(cls, settings: Settings) -> StreamSlots:
        return cls(settings.max_streams, settings.max_streams_per_tenant)
