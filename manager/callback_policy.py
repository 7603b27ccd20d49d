"""When a callback or outcome topic is tried again, and when it is given up: pure, time passed in.

A failed try is retried after 1 s, 2 s, 4 s ... (at most 5 minutes apart) until the deadline (the job's end
plus `callback_retry_for_s`); a try refused for good (`Attempt.final`) is given up at once.
"""

from __future__ import annotations

from dataclasses import dataclass

FIRST_RETRY_S = 1.0
MAX_RETRY_S = 300.0
ERROR_CHARS = 300  # of a failed try's reason kept in the record


@dataclass(frozen=True, slots=True)
class Attempt:
    """What one try on one channel came to. `final`: no later try can do better."""

    ok: bool
    error: str = ""
    final: bool = False


@dataclass(frozen=True, slots=True)
class Settled:
    """What to record after a try: the channel's fields, and when to try again (None: never)."""

    fields: dict[str, str]
    retry_at_ms: int | None
    outcome: str  # the metric's: delivered, retried, undeliverable


def backoff_s(attempts: int, first_s: float = FIRST_RETRY_S, cap_s: float = MAX_RETRY_S) -> float:
    """The wait after the attempts-th failed try: first_s, doubled each time, capped."""
    return float(min(cap_s, first_s * 2 ** max(0, attempts - 1)))


def settle(
    channel: str, attempts: int, attempt: Attempt, now: int, deadline: int, *,
    first_retry_s: float = FIRST_RETRY_S, max_retry_s: float = MAX_RETRY_S,
) -> Settled:  # fmt: skip
    """The channel's record after its attempts-th try at `now` (ms): given up once the next try would
    fall past `deadline` (ms), or at once when the try was refused for good."""
    fields = {f"{channel}_attempts": str(attempts)}
    if attempt.ok:
        fields[f"{channel}_status"] = "delivered"
        return Settled(fields, None, "delivered")
    fields[f"{channel}_error"] = attempt.error[:ERROR_CHARS]
    retry_at = now + int(backoff_s(attempts, first_retry_s, max_retry_s) * 1000)
    if attempt.final or retry_at > deadline:
        fields[f"{channel}_status"] = "undeliverable"
        return Settled(fields, None, "undeliverable")
    return Settled(fields, retry_at, "retried")
