"""What the front door's routes share, built once per execution environment (a Lambda environment, or
the local gateway's process): its settings, the model catalog, the Redis pool and the job store."""

from __future__ import annotations

from functools import cache

from contract.catalog import Catalog
from contract.catalog_build import catalog_of
from contract.job_store import JobStore
from contract.redis_client import SyncRedis, sync_client
from contract.settings import Settings


@cache
def settings() -> Settings:
    return Settings.from_env()


def redis_connections(cfg: Settings) -> int:
    """A connection for every thread the local gateway runs (each of its lanes: frontdoor/lanes.py), so
    a synchronous call blocked on a done-list never leaves a submission queueing for a connection
    (long-polls wait on connections of the server's own: frontdoor/job_waits.py). Lambda runs one
    invocation per execution environment at a time and opens only the one it uses."""
    return cfg.gateway_concurrency + cfg.gateway_long_waits + cfg.gateway_cancels


@cache
def catalog() -> Catalog:
    """The served models (contract/catalog.py), read once per execution environment."""
    return catalog_of(settings())


@cache
def redis_client() -> SyncRedis:
    """One Redis pool per execution environment, shared by every thread and invocation."""
    return sync_client(settings(), max_connections=redis_connections(settings()))


@cache
def store() -> JobStore:
    return JobStore(redis_client(), settings().job_ttl_s, settings().max_queue_length)
