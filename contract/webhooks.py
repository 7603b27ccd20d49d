"""Signing a callback and checking its signature: Stripe's scheme, so receivers' habits carry over.

The `Synapse-Signature` header is `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`. The
timestamp is signed with the body, so a captured request cannot be replayed past the tolerance. A header
may carry several `v1=` values (one per secret while a secret is rotated): any one that matches passes.
docs/callbacks.md (A receiver) walks a receiver through the same check.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "Synapse-Signature"
JOB_ID_HEADER = "Synapse-Job-Id"
ATTEMPT_HEADER = "Synapse-Delivery-Attempt"
SCHEME = "v1"
TOLERANCE_S = 300


def _digest(secret: str, timestamp: int, body: bytes) -> str:
    signed = f"{timestamp}.".encode() + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The `Synapse-Signature` value for a body sent at `timestamp` (unix seconds)."""
    return f"t={timestamp},{SCHEME}={_digest(secret, timestamp, body)}"


def verify(secret: str, header: str, body: bytes, now: float, tolerance_s: float = TOLERANCE_S) -> bool:
    """True when one `v1` signature in the header is the body's under `secret` and its timestamp is within
    tolerance_s of `now` (unix seconds). `body` is the raw request body, before any JSON parsing."""
    timestamp: int | None = None
    signatures: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isascii() and value.isdigit():
            timestamp = int(value)
        elif name == SCHEME:
            signatures.append(value)
    if timestamp is None or abs(now - timestamp) > tolerance_s:
        return False
    expected = _digest(secret, timestamp, body).encode()
    # Every candidate is compared, each in constant time: how long it takes says nothing of the match.
    # As bytes: compare_digest refuses a str that is not ASCII, and a header may hold anything.
    matches = [hmac.compare_digest(expected, c.encode("utf-8", "replace")) for c in signatures]
    return any(matches)
