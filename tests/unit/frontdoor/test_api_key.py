"""One reader of the caller's API key: the authorizer, the idempotency scope and the local gateway agree."""

import hashlib

import pytest
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from contract.tenants import KeyBook, key_digest
from frontdoor import authorizer
from frontdoor.api_key import ambiguity, event_headers, presented_key
from frontdoor.authorizer import KeyDirectory, handler
from frontdoor.idempotency import caller_scope
from frontdoor.tenancy import Caller
from local_stack.gateway import authenticate
from openai_api.errors import Problem
from tests.unit.frontdoor.test_frontdoor_rejections import call, event

# A blank x-api-key beside a bearer token: AWS used to take the token, the local gateway answered 403
# and idempotency scoped the request on the blanks.
BLANK_KEY_AND_BEARER = {"x-api-key": "  ", "Authorization": "Bearer the-key"}


@pytest.mark.parametrize(
    ("headers", "key"),
    [
        ({"x-api-key": "k1"}, "k1"),
        ({"X-API-KEY": " k1 "}, "k1"),
        ({"authorization": "bearer k2"}, "k2"),
        ({"x-api-key": "k1", "Authorization": "Bearer k2"}, "k1"),
        (BLANK_KEY_AND_BEARER, "the-key"),
        ({"Authorization": "Basic abc"}, None),
        ({"x-api-key": ""}, None),
        ({}, None),
    ],
)
def test_the_presented_key(headers: dict[str, str], key: str | None):
    assert presented_key(headers) == key


def test_every_reader_takes_the_bearer_token_beside_a_blank_key(monkeypatch: pytest.MonkeyPatch):
    keys = KeyDirectory(lambda: {key_digest("the-key"): Caller("acme")})  # API Gateway's keys, as read
    monkeypatch.setattr(authorizer, "directory", lambda: keys)
    event = {"headers": BLANK_KEY_AND_BEARER, "methodArn": "arn:aws:execute-api:x"}
    assert handler(event, None)["usageIdentifierKey"] == "the-key"
    assert caller_scope(None, BLANK_KEY_AND_BEARER) == "sha256:" + hashlib.sha256(b"the-key").hexdigest()
    request = make_mocked_request("POST", "/async-infer", headers=BLANK_KEY_AND_BEARER)
    book = KeyBook()
    book.ensure_key("the-key", "acme")
    assert not isinstance(authenticate(request, book), Problem)
    assert isinstance(authenticate(request, KeyBook()), Problem)


OWN, OTHER = "sk-own", "sk-other"


@pytest.mark.parametrize(
    "headers",
    [
        [("X-Api-Key", OWN), ("x-api-key", OTHER), ("X-Api-Key", OWN)],  # the audit's request
        [("x-api-key", OWN), ("x-api-key", OWN)],  # repeated, even with one value
        [("Authorization", f"Bearer {OWN}"), ("authorization", f"Bearer {OTHER}")],
    ],
)
def test_a_repeated_credential_header_is_refused_by_every_reader(headers: list[tuple[str, str]]):
    refused = ambiguity(headers)
    assert refused is not None
    assert (refused.status, refused.code) == (400, "ambiguous_api_key")
    book = KeyBook()
    book.ensure_key(OWN, "acme")
    book.ensure_key(OTHER, "other")
    request = make_mocked_request("POST", "/async-infer", headers=CIMultiDict(headers))
    assert authenticate(request, book) == refused
    multi: dict[str, list[str]] = {}
    for name, value in headers:
        multi.setdefault(name, []).append(value)
    authorizer_event = {"headers": dict(headers), "multiValueHeaders": multi, "methodArn": "arn:aws:x"}
    with pytest.raises(authorizer.UnauthorizedError):
        handler(authorizer_event, None)
    front_door_event = {**event("POST", "/async-infer", '{"model": "gpu-sim", "prompt": "x"}')}
    front_door_event["multiValueHeaders"] = {**front_door_event["multiValueHeaders"], **multi}
    status, payload = call(front_door_event)
    assert (status, payload["error"]["code"]) == (400, "ambiguous_api_key")


@pytest.mark.parametrize(
    "headers",
    [
        [("x-api-key", OWN)],
        [("Authorization", f"Bearer {OWN}")],
        [("x-api-key", OWN), ("Authorization", f"Bearer {OWN}")],
        [("x-api-key", OWN), ("Authorization", f"Bearer {OTHER}")],  # the spec's alternatives: x-api-key wins
        list(BLANK_KEY_AND_BEARER.items()),
    ],
)
def test_one_key_however_presented_is_not_ambiguous(headers: list[tuple[str, str]]):
    assert ambiguity(headers) is None


def test_a_proxy_event_without_multi_value_headers_is_read_from_its_headers():
    assert event_headers({"headers": {"x-api-key": OWN}}) == [("x-api-key", OWN)]
    assert event_headers({"multiValueHeaders": {"x-api-key": [OWN, OTHER]}}) == [
        ("x-api-key", OWN),
        ("x-api-key", OTHER),
    ]
