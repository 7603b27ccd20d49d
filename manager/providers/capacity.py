"""The interface every worker provider implements, and what it reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Capacity:
    desired: int
    running: int


class CapacityProvider(Protocol):
    async def set_desired(self, count: int) -> None:
        """Asks for `count` workers; returns at once, workers arrive when they are ready."""

    async def capacity(self) -> Capacity: ...

    async def aclose(self) -> None: ...
