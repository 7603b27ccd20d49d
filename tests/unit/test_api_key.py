"""One reader of the caller's API key: the authorizer, the idempotency scope and the local gateway agree."""

import hashlib

import pytest
from aiohttp.test_utils import make_mocked_request

from contract.tenants import KeyBook, key_digest
from frontdoor import authorizer
from frontdoor.api_key import presented_key
from frontdoor.authorizer import KeyDirectory, handler
from frontdoor.errors import Problem
from frontdoor.idempotency import caller_scope
from frontdoor.tenancy import Caller
from local_stack.gateway import authenticate

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
