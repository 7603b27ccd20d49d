"""Builds Redis clients from settings: sync for the front door, asyncio for the manager and workers.

One code path for two deployments: a plain Redis (the local stack) or, with `redis_cluster`, a Redis
Cluster (ElastiCache Serverless). Every key shares one hash tag (contract/keys.py), so the scripts,
MULTI/EXEC pipelines and blocking reads run unchanged on either. Authentication is a password
(`redis_auth_token`, the local stack) or, with `redis_iam_user`, ElastiCache IAM (`elasticache_iam`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, TypeAlias

import redis
import redis.asyncio as aioredis
from redis import exceptions as redis_exceptions
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from contract.elasticache_iam import IamAuthError, IamCredentialProvider, provider_for
from contract.settings import Settings

# Long-polls and synchronous /v1 calls block a connection; the socket must outlive them.
SOCKET_TIMEOUT_MARGIN_S = 10.0
ASYNC_MAX_CONNECTIONS = 256  # per node on a cluster; the manager's and the workers' pools

SyncRedis: TypeAlias = redis.Redis | redis.RedisCluster
AsyncRedis: TypeAlias = aioredis.Redis | aioredis.RedisCluster

# What a loop that must outlive a Redis outage catches: a cluster client that reaches no node at all
# raises RedisClusterException, which is not a RedisError.
STORE_ERRORS: tuple[type[Exception], ...] = (redis.RedisError, RedisClusterException, OSError)
READY_FIRST_DELAY_S = 0.1  # until_ready's first pause; it doubles up to READY_MAX_DELAY_S
READY_MAX_DELAY_S = 1.0
READY_SAY_EVERY_S = 5.0


def _options(settings: Settings) -> dict[str, Any]:
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_timeout": max(settings.max_wait_poll_s, settings.sync_timeout_s) + SOCKET_TIMEOUT_MARGIN_S,
        "socket_connect_timeout": 5.0,
        "health_check_interval": 30,
    }
    if settings.redis_iam_user:
        options["credential_provider"] = _iam_provider(settings, settings.redis_iam_user)
    elif settings.redis_auth_token:
        options["password"] = settings.redis_auth_token
    return options


def _iam_provider(settings: Settings, user: str) -> IamCredentialProvider:
    region = settings.redis_iam_region or os.environ.get("AWS_REGION")
    if not settings.redis_iam_cache or not region:
        raise IamAuthError("ElastiCache IAM auth needs SYNAPSE_REDIS_IAM_CACHE and a region (or AWS_REGION)")
    return provider_for(user, settings.redis_iam_cache, region)


def sync_client(
    settings: Settings, max_connections: int = 2048, *, retries: int = 5, timeout_s: float | None = None
) -> SyncRedis:
    """timeout_s, where given, bounds connecting and every reply (a best-effort client's budget).

    On a cluster, max_connections bounds each node's pool; building the client reads the cluster's
    slots, so an unreachable cluster raises redis.ConnectionError here, as a plain client's first call would.
    """
    options = _options(settings)
    if timeout_s is not None:
        options.update(socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    retry = Retry(ExponentialBackoff(cap=2.0, base=0.05), retries=retries)
    if settings.redis_cluster:
        options.pop("health_check_interval")  # not a cluster node option
        try:
            return redis.RedisCluster.from_url(
                settings.redis_url, retry=retry, connection_pool_class=redis.BlockingConnectionPool,
                max_connections=max_connections, timeout=30, **options,
            )  # fmt: skip
        except RedisClusterException as exc:
            raise redis.ConnectionError(str(exc)) from exc
    pool = redis.BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=max_connections, timeout=30, **options
    )
    return redis.Redis(
        connection_pool=pool,
        retry=retry,
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )


def async_client(settings: Settings, max_connections: int = ASYNC_MAX_CONNECTIONS) -> AsyncRedis:
    """It connects on first use; past max_connections (per node on a cluster) a command raises
    MaxConnectionsError, so whoever holds connections for long sizes the pool from its own limits (the
    streaming server: frontdoor/stream_slots.py). A cluster client has no pub/sub: `async_subscriber`
    is for that."""
    if settings.redis_cluster:
        return aioredis.RedisCluster.from_url(
            settings.redis_url, max_connections=max_connections, **_options(settings)
        )
    return aioredis.Redis.from_url(settings.redis_url, max_connections=max_connections, **_options(settings))


async def until_ready(client: AsyncRedis, who: str, log: logging.Logger) -> None:
    """Returns once Redis answers. A Redis still loading its data (BusyLoadingError) or not listening
    yet is not ready, not broken: a process that starts beside it waits, saying what for, rather than
    die with a traceback for its supervisor to restart. Other errors (a wrong password) still raise."""
    waited_s, delay_s, said_at = 0.0, READY_FIRST_DELAY_S, -READY_SAY_EVERY_S
    while True:
        try:
            await client.ping()  # type: ignore[misc]  # redis-py types ping for both clients
            if waited_s:
                log.info("%s: Redis answers after %.1f s", who, waited_s)
            return
        except (redis_exceptions.BusyLoadingError, redis_exceptions.ConnectionError, OSError) as exc:
            if waited_s - said_at >= READY_SAY_EVERY_S:
                why = "it is loading its data" if isinstance(exc, redis_exceptions.BusyLoadingError) else exc
                log.warning("%s: waiting for Redis (%s), %.0f s so far", who, why, waited_s)
                said_at = waited_s
        await asyncio.sleep(delay_s)
        waited_s += delay_s
        delay_s = min(delay_s * 2, READY_MAX_DELAY_S)


def async_subscriber(settings: Settings) -> aioredis.Redis:
    """A plain client to the node `redis_url` names, for SUBSCRIBE.

    The asyncio cluster client has no pub/sub. It needs none: in a Redis Cluster a PUBLISH reaches
    every node, so a subscriber on any one node hears every message.
    """
    return aioredis.Redis.from_url(settings.redis_url, max_connections=4, **_options(settings))
