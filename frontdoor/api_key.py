"""Which API key a request presents: the one reader the authorizer, idempotency and the local gateway share.

A non-blank `x-api-key` wins; otherwise `Authorization: Bearer <key>` (what OpenAI clients send).
Header names match in any case. One reader, so AWS, the local gateway and the idempotency scope can
never disagree about whose request it is.
"""

from __future__ import annotations

from collections.abc import Mapping

BEARER = "bearer "


def presented_key(headers: Mapping[str, str] | None) -> str | None:
    """The presented API key, or None when the request carries none."""
    lowered = {name.lower(): value for name, value in (headers or {}).items()}
    key = lowered.get("x-api-key", "").strip()
    if not key:
        authorization = lowered.get("authorization", "")
        if authorization.lower().startswith(BEARER):
            key = authorization[len(BEARER) :].strip()
    return key or None
