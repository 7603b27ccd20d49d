"""What one front-door process holds for its clients, counted per tenant: a capacity, and for each
tenant a share of it. `Shares.take` answers why not (a 429 past the tenant's share, a 503 past the
capacity) before anything is done; the stream slots and the server's lanes both count this way.
Takers run on the server's threads and give back on its event loop, hence the lock."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from openai_api.errors import Problem


@dataclass(frozen=True, slots=True)
class Refusals:
    """What is answered past the capacity (503), and past a tenant's share (429) where there are shares."""

    full: Callable[[int], Problem]
    over_share: Callable[[str, int], Problem] | None = None


class Shares:
    """Counts what each tenant holds; refuses one past the tenant's share or past the capacity."""

    def __init__(self, capacity: int, per_tenant: int, refusals: Refusals) -> None:
        self.capacity = capacity
        self.per_tenant = per_tenant
        self._refusals = refusals
        self._held: Counter[str] = Counter()
        self._total = 0
        self._lock = threading.Lock()

    def take(self, tenant: str) -> Problem | None:
        """One for the tenant (None), or why not."""
        with self._lock:
            over_share = self._refusals.over_share
            if over_share is not None and self._held[tenant] >= self.per_tenant:
                return over_share(tenant, self.per_tenant)
            if self._total >= self.capacity:
                return self._refusals.full(self.capacity)
            self._held[tenant] += 1
            self._total += 1
        return None

    def give_back(self, tenant: str) -> None:
        with self._lock:
            self._held[tenant] -= 1
            self._total -= 1
            if self._held[tenant] <= 0:
                del self._held[tenant]

    def held(self, tenant: str | None = None) -> int:
        """What is held: the tenant's, or everyone's."""
        return self._held[tenant] if tenant is not None else self._total
