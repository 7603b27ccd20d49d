"""ElastiCache IAM tokens: their shape, signed offline with fixed keys, and when they are signed anew."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
import redis
from botocore.credentials import Credentials
from botocore.exceptions import EndpointConnectionError

from contract.elasticache_iam import REFRESH_MARGIN_S, TOKEN_LIFETIME_S, IamCredentialProvider, auth_token

KEYS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")


def query_of(token: str) -> tuple[str, str, dict[str, str]]:
    parts = urlsplit("https://" + token)
    fields = {name: values[0] for name, values in parse_qs(parts.query, strict_parsing=True).items()}
    return parts.netloc, parts.path, fields


def test_a_token_is_a_presigned_connect_request_without_its_scheme():
    token = auth_token(user="synapse-app", cache_name="Synapse-Cache", region="eu-west-1", credentials=KEYS)

    assert not token.startswith(("https://", "http://"))
    host, path, query = query_of(token)
    assert (host, path) == ("synapse-cache", "/")  # ElastiCache wants the cache's name in lowercase
    assert query["Action"] == "connect"
    assert query["User"] == "synapse-app"
    assert query["ResourceType"] == "ServerlessCache"
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert query["X-Amz-Expires"] == "900"
    assert re.fullmatch(r"AKIDEXAMPLE/\d{8}/eu-west-1/elasticache/aws4_request", query["X-Amz-Credential"])
    assert query["X-Amz-SignedHeaders"] == "host"
    assert re.fullmatch(r"[0-9a-f]{64}", query["X-Amz-Signature"])
    assert "X-Amz-Security-Token" not in query


def test_a_role_s_session_token_travels_with_the_signature():
    role = Credentials("ASIAEXAMPLE", "secret", token="session-token")
    _, _, query = query_of(auth_token(user="u", cache_name="c", region="us-east-1", credentials=role))
    assert query["X-Amz-Security-Token"] == "session-token"


def test_the_signature_depends_on_the_secret_key():
    other = Credentials("AKIDEXAMPLE", "another-secret")
    signatures = {
        query_of(auth_token(user="u", cache_name="c", region="us-east-1", credentials=keys))[2][
            "X-Amz-Signature"
        ]
        for keys in (KEYS, other)
    }
    assert len(signatures) == 2


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingKeys:
    """The role's credentials as botocore would hand them out, counting how often they are asked for."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> Credentials:
        self.calls += 1
        return Credentials(f"ASIA{self.calls}", "secret", token=f"session-{self.calls}")


async def test_a_token_is_reused_while_fresh_and_signed_anew_before_it_expires():
    clock, keys = Clock(), CountingKeys()
    provider = IamCredentialProvider(
        user="synapse-app", cache_name="c", region="eu-west-1", credentials=keys, clock=clock
    )

    user, first = provider.get_credentials()
    clock.now += TOKEN_LIFETIME_S - REFRESH_MARGIN_S - 1
    assert provider.get_credentials() == (user, first)
    assert await provider.get_credentials_async() == (user, first)
    assert keys.calls == 1

    clock.now += 2  # within the margin: the old token would expire before a slow connect finished
    renewed_user, renewed = await provider.get_credentials_async()
    assert (renewed_user, keys.calls) == ("synapse-app", 2)
    assert query_of(renewed)[2]["X-Amz-Security-Token"] == "session-2"


def test_credentials_that_cannot_be_fetched_are_a_redis_connection_error():
    """The loops that outlive a Redis outage catch ConnectionError; a role's refresh failing is one."""

    def unreachable() -> Credentials:
        raise EndpointConnectionError(endpoint_url="http://169.254.170.2/v2/credentials")

    provider = IamCredentialProvider(user="u", cache_name="c", region="eu-west-1", credentials=unreachable)
    with pytest.raises(redis.ConnectionError, match="cannot get AWS credentials"):
        provider.get_credentials()
