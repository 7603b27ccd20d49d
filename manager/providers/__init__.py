"""Worker capacity behind one small interface: the autoscaler never knows which provider it drives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from manager.settings import Settings


@dataclass(frozen=True, slots=True)
class Capacity:
    desired: int
    running: int


class CapacityProvider(Protocol):
    async def set_desired(self, count: int) -> None:
        """Asks for `count` workers; returns at once, workers arrive when they are ready."""

    async def capacity(self) -> Capacity: ...

    async def aclose(self) -> None: ...


def provider_for(settings: Settings) -> CapacityProvider | None:
    """The provider the settings name, or None when workers are managed outside the manager."""
    if settings.worker_provider == "local":
        from manager.providers.local import LocalProvider

        return LocalProvider(settings)
    if settings.worker_provider == "ecs":
        from manager.providers.ecs import EcsProvider

        return EcsProvider.from_settings(settings)
    return None
