"""Worker capacity behind one small interface: the autoscaler never knows which provider it drives."""

from __future__ import annotations

from contract.settings import Settings
from manager.providers.capacity import Capacity, CapacityProvider

__all__ = ["Capacity", "CapacityProvider", "provider_for"]


def provider_for(settings: Settings) -> CapacityProvider | None:
    """The provider the settings name, or None when workers are managed outside the manager."""
    if settings.worker_provider == "local":
        from manager.providers.local import LocalProvider

        return LocalProvider(settings)
    if settings.worker_provider == "ecs":
        from manager.providers.ecs import EcsProvider

        return EcsProvider.from_settings(settings)
    return None
