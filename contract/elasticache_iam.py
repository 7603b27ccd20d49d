"""ElastiCache IAM authentication: the AUTH password is a short-lived SigV4 signature, not a secret.

A token is a presigned `GET https://<cache>/?Action=connect&User=<user>&ResourceType=ServerlessCache`
for the `elasticache` service, valid 15 minutes, with the scheme left off. ElastiCache checks it only
at AUTH, when a connection opens, and closes IAM-authenticated connections after 12 hours; redis-py
then reconnects and asks the provider again. So a token is reused while it is fresh and signed anew
with the process's current AWS credentials (the Lambda's or the ECS task's role) before it expires.
No call goes out to sign: only refreshing the role's credentials may.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from functools import cache

import botocore.session
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from redis import exceptions as redis_errors
from redis.credentials import CredentialProvider

SERVICE = "elasticache"
TOKEN_LIFETIME_S = 900  # the longest ElastiCache accepts
REFRESH_MARGIN_S = 120  # signed anew this long before the old token would expire


class IamAuthError(redis_errors.ConnectionError):
    """No token to sign: no AWS credentials or region, or fetching the role's credentials failed.

    A Redis ConnectionError, so the loops that outlive a Redis outage (STORE_ERRORS) outlive this
    too, and the front door answers 503: it raises inside redis-py's connect, which wraps nothing.
    """


def auth_token(*, user: str, cache_name: str, region: str, credentials: Credentials) -> str:
    """A token to connect as `user` to the serverless cache `cache_name` (ElastiCache wants it lowercase)."""
    request = AWSRequest(
        method="GET",
        url=f"https://{cache_name.lower()}/",
        params={"Action": "connect", "User": user, "ResourceType": "ServerlessCache"},
    )
    SigV4QueryAuth(credentials, SERVICE, region, expires=TOKEN_LIFETIME_S).add_auth(request)
    return str(request.url).removeprefix("https://")


def _role_credentials() -> Credentials:
    """The process's credentials as botocore finds them (environment, ECS task role), refreshed as due."""
    found = botocore.session.get_session().get_credentials()
    if found is None:
        raise IamAuthError("no AWS credentials to sign an ElastiCache IAM token with")
    frozen = found.get_frozen_credentials()
    if not frozen.access_key or not frozen.secret_key:
        raise IamAuthError("the AWS credentials found have no key to sign an ElastiCache IAM token with")
    return Credentials(frozen.access_key, frozen.secret_key, frozen.token)


class IamCredentialProvider(CredentialProvider):
    """redis-py's hook for AUTH: the user id and a token, signed again only when it nears expiry.

    Shared by every connection of a process, from any thread (the local gateway's) or event loop.
    """

    def __init__(
        self,
        *,
        user: str,
        cache_name: str,
        region: str,
        credentials: Callable[[], Credentials] = _role_credentials,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._user, self._cache_name, self._region = user, cache_name, region
        self._credentials = credentials
        self._clock = clock
        self._lock = threading.Lock()
        self._token = ""
        self._fresh_until = float("-inf")

    def _fresh_token(self) -> str | None:
        return self._token if self._clock() < self._fresh_until else None

    def get_credentials(self) -> tuple[str, str]:
        with self._lock:
            if self._fresh_token() is None:
                signed_at = self._clock()
                try:
                    credentials = self._credentials()
                except IamAuthError:
                    raise
                except Exception as exc:  # botocore's, while it fetches the task role's credentials
                    raise IamAuthError(f"cannot get AWS credentials to sign a token: {exc}") from exc
                self._token = auth_token(
                    user=self._user, cache_name=self._cache_name, region=self._region,
                    credentials=credentials,
                )  # fmt: skip
                self._fresh_until = signed_at + TOKEN_LIFETIME_S - REFRESH_MARGIN_S
            return self._user, self._token

    async def get_credentials_async(self) -> tuple[str, str]:
        """A fresh token at once; else signed on a thread (refreshing a role's credentials is HTTP)."""
        token = self._fresh_token()
        if token is not None:
            return self._user, token
        return await asyncio.to_thread(self.get_credentials)


@cache
def provider_for(user: str, cache_name: str, region: str) -> IamCredentialProvider:
    """One provider per process and cache, so every client of the process shares its token."""
    return IamCredentialProvider(user=user, cache_name=cache_name, region=region)
