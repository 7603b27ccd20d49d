"""The request authorizer passes the presented key on to API Gateway's usage plan, whichever header, and
names the key's tenant from its tags; a key it cannot find runs as no tenant at all."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from frontdoor import authorizer
from frontdoor.api_key import presented_key
from frontdoor.authorizer import KeyDirectory, UnauthorizedError, fetch_keys, handler
from frontdoor.tenancy import Caller

ARN = "arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/POST/v1/chat/completions"
ACME_KEY = "sk-acme-0123456789abcdefghij"


@pytest.fixture
def apigateway(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """API Gateway on moto, with acme's key (tagged with its tenant and quota); no real AWS reached."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    authorizer.directory.cache_clear()
    with mock_aws():
        client = boto3.client("apigateway")
        tags = {"synapse:tenant": "acme", "synapse:max-inflight": "3"}
        client.create_api_key(name="acme-ci", enabled=True, value=ACME_KEY, tags=tags)
        yield client
    authorizer.directory.cache_clear()


def request(key_headers: dict[str, str]) -> dict[str, Any]:
    return {"methodArn": ARN, "headers": key_headers}


@pytest.mark.parametrize(
    ("headers", "key"),
    [
        ({"x-api-key": "k1"}, "k1"),
        ({"X-Api-Key": "k1"}, "k1"),
        ({"Authorization": "Bearer k2"}, "k2"),
        ({"authorization": "bearer   k2 "}, "k2"),
        ({"x-api-key": "k1", "Authorization": "Bearer k2"}, "k1"),
        ({"Authorization": "Basic dXNlcg=="}, None),
        ({"x-api-key": "  "}, None),
        ({}, None),
        (None, None),
    ],
)
def test_the_key_comes_from_x_api_key_or_a_bearer_token(headers, key):
    assert presented_key(headers) == key


def test_a_known_key_is_allowed_metered_by_itself_and_names_its_tenant_and_quota(apigateway):
    answer = handler(request({"Authorization": f"Bearer {ACME_KEY}"}), None)
    assert answer["usageIdentifierKey"] == ACME_KEY
    assert answer["policyDocument"]["Statement"] == [
        {"Action": "execute-api:Invoke", "Effect": "Allow", "Resource": ARN}
    ]
    assert answer["context"] == Caller("acme", 3).authorizer_context()


@pytest.mark.parametrize(
    ("name", "tags", "caller"),
    [
        ("beta/batch-jobs", None, Caller("beta", 0)),
        ("beta/ci", {"synapse:max-inflight": "7"}, Caller("beta", 7)),
        ("Synapse default client key", {"synapse:tenant": "default"}, Caller("default", 0)),
        ("gamma/x", {"synapse:tenant": "delta"}, Caller("delta", 0)),
    ],
)
def test_without_a_tenant_tag_the_tenant_is_the_name_before_a_slash(
    apigateway, name: str, tags: dict[str, str] | None, caller: Caller
):
    key = f"sk-{name.replace(' ', '-').replace('/', '-')}-0123456789"
    apigateway.create_api_key(name=name, enabled=True, value=key, **({"tags": tags} if tags else {}))
    assert handler(request({"x-api-key": key}), None)["context"] == caller.authorizer_context()


@pytest.mark.parametrize(
    "tags", [{"synapse:tenant": "Not A Tenant"}, {"synapse:max-inflight": "many"}, {"team": "acme"}]
)
def test_a_key_whose_tags_name_no_tenant_or_quota_is_denied(apigateway, tags: dict[str, str]):
    """A key named without a `/` and not tagged names no tenant: denied, never run as the default's."""
    apigateway.create_api_key(name="odd", enabled=True, value="sk-odd-0123456789abcdef", tags=tags)
    answer = handler(request({"x-api-key": "sk-odd-0123456789abcdef"}), None)
    assert answer["policyDocument"]["Statement"][0]["Effect"] == "Deny"
    assert "context" not in answer


def test_an_unknown_key_is_denied_and_gets_no_tenant_least_of_all_the_default(apigateway):
    answer = handler(request({"x-api-key": "sk-nobody-0123456789abcdef"}), None)
    assert answer["usageIdentifierKey"] == "sk-nobody-0123456789abcdef"
    assert answer["policyDocument"]["Statement"][0]["Effect"] == "Deny"
    assert "context" not in answer


def test_a_request_without_a_key_is_unauthorized():
    with pytest.raises(UnauthorizedError, match=r"^Unauthorized$"):
        handler({"methodArn": ARN, "headers": {"content-type": "application/json"}}, None)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_keys_are_read_once_a_minute_and_on_a_miss_at_most_every_five_seconds(apigateway):
    clock, reads = Clock(), []

    def read() -> dict[str, Caller | None]:
        reads.append(clock.now)
        return fetch_keys(apigateway)

    keys = KeyDirectory(read, clock)
    assert keys.find(ACME_KEY) == Caller("acme", 3)
    clock.now += 30
    assert keys.find(ACME_KEY) == Caller("acme", 3)
    assert len(reads) == 1, "a known key within the minute: no call to API Gateway"

    first, second = "sk-first-0123456789abcdefgh", "sk-second-0123456789abcdefg"
    apigateway.create_api_key(name="epsilon/first", enabled=True, value=first)
    assert keys.find(first) == Caller("epsilon", 0), "a miss reads again: a key created a moment ago"
    assert len(reads) == 2
    apigateway.create_api_key(name="epsilon/second", enabled=True, value=second)
    clock.now += 4
    assert keys.find(second) is None, "a miss within 5 s of the last read: not read again"
    assert len(reads) == 2
    clock.now += 1
    assert keys.find(second) == Caller("epsilon", 0)
    assert len(reads) == 3
    clock.now += 60
    keys.find(ACME_KEY)
    assert len(reads) == 4, "a minute after the last read, even a known key reads again"


def test_a_failed_read_keeps_the_keys_read_before(apigateway):
    clock, fail = Clock(), []

    def read() -> dict[str, Caller | None]:
        if fail:
            apigateway.get_api_key(apiKey="no-such-key")  # a ClientError, as a throttled call raises
        return fetch_keys(apigateway)

    keys = KeyDirectory(read, clock)
    assert keys.find(ACME_KEY) == Caller("acme", 3)
    fail.append(True)
    clock.now += 61
    assert keys.find(ACME_KEY) == Caller("acme", 3)
