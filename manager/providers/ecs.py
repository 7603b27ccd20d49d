"""Workers as tasks of the GPU worker service on ECS: the provider sets the service's desired count.

The EC2 Auto Scaling group behind the service's capacity provider (and its warm pool of stopped,
pre-initialised instances) follows the tasks; the manager only ever changes the desired count,
which is also all its IAM role allows.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import boto3

from contract.settings import Settings
from manager.providers.capacity import Capacity

log = logging.getLogger(__name__)


class EcsProvider:
    def __init__(self, client: Any, cluster: str, service: str) -> None:
        self._ecs = client
        self._cluster = cluster
        self._service = service
        self._last_set: int | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> EcsProvider:
        if not settings.ecs_cluster or not settings.ecs_worker_service:
            raise ValueError("the ecs provider needs SYNAPSE_ECS_CLUSTER and SYNAPSE_ECS_WORKER_SERVICE")
        return cls(boto3.client("ecs"), settings.ecs_cluster, settings.ecs_worker_service)

    async def set_desired(self, count: int) -> None:
        if count == self._last_set:
            return  # one UpdateService per change, not per tick
        await asyncio.to_thread(
            self._ecs.update_service, cluster=self._cluster, service=self._service, desiredCount=count
        )
        log.info("ECS service %s desired count -> %d", self._service, count)
        self._last_set = count

    async def capacity(self) -> Capacity:
        reply = await asyncio.to_thread(
            self._ecs.describe_services, cluster=self._cluster, services=[self._service]
        )
        service = reply["services"][0]
        self._last_set = int(service["desiredCount"])
        return Capacity(desired=self._last_set, running=int(service["runningCount"]))

    async def aclose(self) -> None:
        """Leaves the service as it is: another manager takes over the scaling."""
