"""API Gateway's request authorizer: lets a client present its API key as `Authorization: Bearer`, and
names the key's tenant.

API Gateway's usage plans read the key from `x-api-key` only, but OpenAI clients send a bearer
token. With the API's key source set to AUTHORIZER, this function hands API Gateway whichever of the
two the request carries as `usageIdentifierKey`; API Gateway itself then checks it against the
usage plan (403 for a key it does not know), exactly as for `x-api-key`.

It also returns the key's tenant and in-flight quota as its `context`, which API Gateway hands the
front door as `requestContext.authorizer` (frontdoor/tenancy.py): the tenant is the key's tag
`synapse:tenant` (else its name up to a `/`, `acme/ci` being acme's; else `default`), the quota its tag
`synapse:max-inflight` (else none). Keys are read with their values and tags by GetApiKeys, kept for a
minute in the execution environment, and read again on a miss at most every 5 s. A key this function
cannot find (or whose tenant tag is not a tenant name) is denied: no request may run as a tenant it was
not given, the default tenant least of all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from contract.tenants import TENANT_NAME, key_digest
from frontdoor.api_key import ambiguity, event_headers, presented_key
from frontdoor.tenancy import Caller

log = logging.getLogger(__name__)

TENANT_TAG = "synapse:tenant"
MAX_INFLIGHT_TAG = "synapse:max-inflight"
KEYS_TTL_S = 60.0
MISS_REFRESH_S = 5.0
PAGE_SIZE = 500  # GetApiKeys' largest page


class UnauthorizedError(Exception):
    """Raised with the message "Unauthorized": API Gateway answers 401 without calling the API."""


def caller_of_key(item: Mapping[str, Any]) -> Caller | None:
    """The caller an API key (a GetApiKeys item) stands for; None when its tags name no valid tenant."""
    tags = item.get("tags") or {}
    name = str(item.get("name") or "")
    # A key that names no tenant is denied, never the default tenant's: that would hand it the jobs of
    # the stack's own key. The stack tags its key `synapse:tenant=default` itself.
    tenant = tags.get(TENANT_TAG) or (name.split("/", 1)[0] if "/" in name else "")
    max_inflight = _quota(tags.get(MAX_INFLIGHT_TAG) or "0")
    if not TENANT_NAME.fullmatch(tenant) or max_inflight is None:
        log.error("API key %s: its tags %s name no tenant or quota; it is denied", item.get("id"), tags)
        return None
    return Caller(tenant, max_inflight)


def _quota(tag: str) -> int | None:
    try:
        value = int(tag)
    except ValueError:
        return None
    return value if value >= 0 else None


def fetch_keys(client: Any) -> dict[str, Caller | None]:
    """Every API key of the account and region, by the SHA-256 of its value: one GetApiKeys per 500."""
    pages = client.get_paginator("get_api_keys").paginate(
        includeValues=True, PaginationConfig={"PageSize": PAGE_SIZE}
    )
    return {
        key_digest(item["value"]): caller_of_key(item)
        for page in pages
        for item in page.get("items", [])
        if item.get("value")
    }


class KeyDirectory:
    """API keys and their callers, read in full and kept for KEYS_TTL_S; a key not found reads them
    again, at most every MISS_REFRESH_S (a key created a moment ago, or one that is no key at all)."""

    def __init__(
        self, fetch: Callable[[], dict[str, Caller | None]], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._fetch = fetch
        self._clock = clock
        self._keys: dict[str, Caller | None] = {}
        self._read_at: float | None = None

    def find(self, key: str) -> Caller | None:
        """The key's caller; None for a key not found, or one whose tags name no tenant."""
        digest = key_digest(key)
        missing = digest not in self._keys
        if self._is_older_than(KEYS_TTL_S) or (missing and self._is_older_than(MISS_REFRESH_S)):
            self._read()
        return self._keys.get(digest)

    def _is_older_than(self, seconds: float) -> bool:
        return self._read_at is None or self._clock() - self._read_at >= seconds

    def _read(self) -> None:
        try:
            self._keys = self._fetch()
        except (BotoCoreError, ClientError):
            if self._read_at is None:
                raise  # nothing to go on: API Gateway answers 500, the client retries
            log.exception("could not read the API keys; using those read before")
        self._read_at = self._clock()


@cache
def directory() -> KeyDirectory:
    """One per execution environment: its cache outlives the invocation."""
    client = boto3.client("apigateway")
    return KeyDirectory(lambda: fetch_keys(client))


def answer(event: Mapping[str, Any], key: str, caller: Caller | None) -> dict[str, Any]:
    """Allow with the caller's context, or Deny (API Gateway answers 403) without a caller."""
    statement = {
        "Action": "execute-api:Invoke",
        "Effect": "Allow" if caller else "Deny",
        "Resource": event["methodArn"],
    }
    result: dict[str, Any] = {
        "principalId": caller.tenant if caller else "unknown-key",
        "policyDocument": {"Version": "2012-10-17", "Statement": [statement]},
        "usageIdentifierKey": key,
    }
    if caller:
        result["context"] = caller.authorizer_context()
    return result


def handler(event: Mapping[str, Any], context: object) -> dict[str, Any]:
    """401 for no key, and for credentials that name more than one (frontdoor/api_key.py)."""
    key = presented_key(event.get("headers"))
    if key is None or ambiguity(event_headers(event)) is not None:
        raise UnauthorizedError("Unauthorized")
    return answer(event, key, directory().find(key))
