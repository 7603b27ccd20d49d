"""Which API key a request presents: the one reader the authorizer, idempotency and the local gateway share.

A non-blank `x-api-key` wins; otherwise `Authorization: Bearer <key>` (what OpenAI clients send).
Header names match in any case. One reader, so AWS, the local gateway and the idempotency scope can
never disagree about whose request it is. A request that repeats a credential header (in whatever
case) is refused before any of them reads it (`ambiguity`): readers that pick different copies would
let one key's check vouch for another key's idempotency scope. `x-api-key` beside a bearer token is
no such case: the spec offers the two as alternatives, and every reader takes `x-api-key` first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from openai_api.errors import Problem

BEARER = "bearer "
API_KEY_HEADER = "x-api-key"
AUTHORIZATION = "authorization"


def presented_key(headers: Mapping[str, str] | None) -> str | None:
    """The presented API key, or None when the request carries none."""
    lowered = {name.lower(): value for name, value in (headers or {}).items()}
    key = lowered.get(API_KEY_HEADER, "").strip()
    if not key:
        authorization = lowered.get(AUTHORIZATION, "")
        if authorization.lower().startswith(BEARER):
            key = authorization[len(BEARER) :].strip()
    return key or None


def ambiguity(headers: Iterable[tuple[str, str]]) -> Problem | None:
    """A 400 for a credential header sent more than once, or None. `headers` holds every header line,
    repeats included: an aiohttp request's `headers.items()`, or `event_headers` of a proxy event."""
    counts = {API_KEY_HEADER: 0, AUTHORIZATION: 0}
    for name, _value in headers:
        if name.lower() in counts:
            counts[name.lower()] += 1
    for name, count in counts.items():
        if count > 1:
            message = f"the request carries {count} {name} headers; send your API key once"
            return Problem(400, "ambiguous_api_key", message, param=name)
    return None


def event_headers(event: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every header line of an API Gateway proxy or REQUEST-authorizer event: `multiValueHeaders` keeps
    the repeats that `headers` folds into one (docs.aws.amazon.com/apigateway/latest/developerguide/
    api-gateway-lambda-authorizer-input.html, .../set-up-lambda-proxy-integrations.html)."""
    multi = event.get("multiValueHeaders")
    if multi:
        return [(name, value) for name, values in multi.items() for value in values or ()]
    return list((event.get("headers") or {}).items())
