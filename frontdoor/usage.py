"""What the front door's requests cost to serve: requests and billed Lambda milliseconds, by route.

API Gateway bills every request and Lambda every invocation's duration, rounded up to the
millisecond, and neither has a /metrics the manager could scrape. So the front door adds them up
into a Redis hash (`REQUESTS_KEY`: `<route>:count`, `<route>:ms`), which the manager exports and
prices (manager/cost.py). A client that polls ten times costs ten requests.

Each process sums its requests in memory and writes them with one pipeline at most once per
interval, so a request pays no Redis round trip for this, except the first after a quiet interval.
The price of that: counts reach Redis up to one interval late (the next request writes them), and
a Lambda environment that AWS reclaims loses at most its last interval's counts. A write that fails
keeps its counts for the next one.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping

from contract.prices import billed_ms

FLUSH_INTERVAL_S = 1.0
PUBLIC_PATHS = frozenset({"/healthz", "/openapi.json", "/docs"})
# The Batch API's routes: a name of their own, so the ledger shows what a batch's calls cost apart from
# the /v1 calls that each carry one request.
BATCH_PREFIXES = ("/v1/files", "/v1/uploads", "/v1/batches")
# Routes named by their paths' prefixes, first match wins. The Responses API's: its reads and resumed
# streams are requests a chat call does not make.
PREFIXED_ROUTES = (("batch", BATCH_PREFIXES), ("responses", ("/v1/responses",)), ("jobs", ("/jobs",)))

# Writes the increments; False when they could not be written (they are kept for the next write).
Writer = Callable[[Mapping[str, int]], bool]


def route_of(path: str) -> str:
    """A fixed handful of names, whatever the path: submit, result, stream, batch, responses, v1, jobs,
    public or other."""
    if path == "/async-infer":
        return "submit"
    if path.startswith("/results/"):
        return "stream" if path.endswith("/stream") else "result"
    for name, prefixes in PREFIXED_ROUTES:
        if any(path == prefix or path.startswith(prefix + "/") for prefix in prefixes):
            return name
    if path.startswith("/v1/"):
        return "v1"
    return "public" if path in PUBLIC_PATHS else "other"


class RequestTally:
    """Per-process sums of requests and billed milliseconds, written out at most once per interval."""

    def __init__(
        self,
        write: Writer,
        *,
        interval_s: float = FLUSH_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write = write
        self._interval_s = interval_s
        self._clock = clock
        self._pending: Counter[str] = Counter()
        self._last_write = -math.inf
        self._lock = threading.Lock()

    def add(self, route: str, *, requests: int, seconds: float) -> None:
        """One request (or, with requests=0, more time spent on one already counted)."""
        with self._lock:
            if requests:
                self._pending[f"{route}:count"] += requests
            self._pending[f"{route}:ms"] += billed_ms(seconds)
            now = self._clock()
            if now - self._last_write < self._interval_s:
                return
            # Taken under the lock, written outside it: other threads go on counting meanwhile.
            taken, self._pending, self._last_write = self._pending, Counter(), now
        if not self._write({field: n for field, n in taken.items() if n}):
            with self._lock:
                self._pending.update(taken)
