"""Which API key a request presents: the one reader the authorizer, idempotency and the local gateway share.

A non-blank `x-api-key` wins; otherwise `Authorization: Bearer <key>` (what OpenAI clients send).
Header names match in any case. One reader, so AWS, the local gateway and the idempotency scope can
never disagree about whose request it is. A request that repeats a credential header (in whatever
case), or names one key in `x-api-key` and another as its bearer token, is refused before any of
them reads it (`ambiguity`): readers that pick different copies would let one key's check vouch for
another key's idempotency scope.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from frontdoor.errors import Problem

BEARER = "bearer "
API_KEY_HEADER = "x-api-key"
AUTHORIZATION = "authorization"


def presented_key(headers: Mapping[str, str] | None) -> str | None:
    """The presented API key, or None when the request carries none."""
    lowered = {name.lower(): value for name, value in (headers or {}).items()}
    key = lowered.get(API_KEY_HEADER, "").strip()
    if not key:
        key = _bearer(lowered.get(AUTHORIZATION, ""))
    return key or None


def _bearer(authorization: str) -> str:
    return authorization[len(BEARER) :].strip() if authorization.lower().startswith(BEARER) else ""


def ambiguity(headers: Iterable[tuple[str, str]]) -> Problem | None:
    """A 400 for credentials that name more than one key, or None. `headers` holds every header line,
    repeats included: an aiohttp request's `headers.items()`, or `event_headers` of a proxy event."""
    seen: dict[str, list[str]] = {API_KEY_HEADER: [], AUTHORIZATION: []}
    for name, value in headers:
        if name.lower() in seen:
            seen[name.lower()].append(value)
    for name, values in seen.items():
        if len(values) > 1:
            message = f"the request carries {len(values)} {name} headers; send your API key once"
            return Problem(400, "ambiguous_api_key", message, param=name)
    key = "".join(seen[API_KEY_HEADER]).strip()
    bearer = _bearer("".join(seen[AUTHORIZATION]))
    if key and bearer and key != bearer:
        message = "x-api-key and Authorization: Bearer name two different keys; send your API key once"
        return Problem(400, "ambiguous_api_key", message, param=API_KEY_HEADER)
    return None


def event_headers(event: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every header line of an API Gateway proxy or REQUEST-authorizer event: `multiValueHeaders` keeps
    the repeats that `headers` folds into one (docs.aws.amazon.com/apigateway/latest/developerguide/
    api-gateway-lambda-authorizer-input.html, .../set-up-lambda-proxy-integrations.html)."""
    multi = event.get("multiValueHeaders")
    if multi:
        return [(name, value) for name, values in multi.items() for value in values or ()]
    return list((event.get("headers") or {}).items())
