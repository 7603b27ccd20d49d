"""Builds Redis clients from settings: sync for the front door, asyncio for the manager and workers."""

from __future__ import annotations

from functools import cache
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from contract.settings import Settings

# Long-polls and synchronous /v1 calls block a connection; the socket must outlive them.
SOCKET_TIMEOUT_MARGIN_S = 10.0


@cache
def _secret_token(secret_arn: str) -> str:
    """The AUTH token from Secrets Manager, fetched once per Lambda execution environment."""
    from aws_lambda_powertools.utilities.parameters import get_secret

    return str(get_secret(secret_arn))


def _options(settings: Settings) -> dict[str, Any]:
    password = settings.redis_auth_token
    if password is None and settings.redis_auth_secret_arn:
        password = _secret_token(settings.redis_auth_secret_arn)
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_timeout": max(settings.max_wait_poll_s, settings.sync_timeout_s) + SOCKET_TIMEOUT_MARGIN_S,
        "socket_connect_timeout": 5.0,
        "health_check_interval": 30,
    }
    if password:
        options["password"] = password
    return options


def sync_client(
    settings: Settings, max_connections: int = 2048, *, retries: int = 5, timeout_s: float | None = None
) -> redis.Redis:
    """timeout_s, where given, bounds connecting and every reply (a best-effort client's budget)."""
    options = _options(settings)
    if timeout_s is not None:
        options.update(socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    pool = redis.BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=max_connections, timeout=30, **options
    )
    retry = Retry(ExponentialBackoff(cap=2.0, base=0.05), retries=retries)
    return redis.Redis(
        connection_pool=pool,
        retry=retry,
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )


def async_client(settings: Settings) -> aioredis.Redis:
    return aioredis.Redis.from_url(settings.redis_url, max_connections=256, **_options(settings))
