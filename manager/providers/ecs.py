"""Workers as tasks of the GPU worker service on ECS: the provider sets the service's desired count.

The EC2 Auto Scaling group behind the service's capacity provider (and its warm pool of stopped,
pre-initialised instances) follows the tasks. ECS managed scaling alone reacts through a CloudWatch
alarm on its CapacityProviderReservation metric, published once a minute: one to two minutes before a
warm-pool instance is even asked to start
(https://docs.aws.amazon.com/AmazonECS/latest/developerguide/cluster-auto-scaling.html). So when the
manager asks for more workers than the group has instances, it raises the group's desired capacity
itself (SetDesiredCapacity, without cool-down), a worker task taking an instance's one GPU. It only
ever raises it: scaling in, and which instance goes, stay with managed scaling and its termination
protection, which never stops an instance that runs a task.
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
    def __init__(
        self, client: Any, cluster: str, service: str, autoscaling: Any = None, group: str | None = None
    ) -> None:
        self._ecs = client
        self._cluster = cluster
        self._service = service
        self._autoscaling = autoscaling
        self._group = group
        self._last_set: int | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> EcsProvider:
        if not settings.ecs_cluster or not settings.ecs_worker_service:
            raise ValueError("the ecs provider needs SYNAPSE_ECS_CLUSTER and SYNAPSE_ECS_WORKER_SERVICE")
        group = settings.ecs_worker_asg
        autoscaling = boto3.client("autoscaling") if group else None
        return cls(boto3.client("ecs"), settings.ecs_cluster, settings.ecs_worker_service, autoscaling, group)

    async def set_desired(self, count: int) -> None:
        if count == self._last_set:
            return  # one UpdateService per change, not per tick
        await asyncio.to_thread(
            self._ecs.update_service, cluster=self._cluster, service=self._service, desiredCount=count
        )
        log.info("ECS service %s desired count -> %d", self._service, count)
        raised = self._last_set is None or count > self._last_set
        self._last_set = count
        if raised and self._group is not None:
            await asyncio.to_thread(self._start_instances, count)

    def _start_instances(self, count: int) -> None:
        """Raises the group's desired capacity to `count` instances (at most its maximum) where it is
        lower; a failure is logged, since managed scaling's alarm still brings the instances, later."""
        try:
            reply = self._autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[self._group])
            group = reply["AutoScalingGroups"][0]
            wanted = min(count, int(group["MaxSize"]))
            if wanted > int(group["DesiredCapacity"]):
                self._autoscaling.set_desired_capacity(
                    AutoScalingGroupName=self._group, DesiredCapacity=wanted, HonorCooldown=False
                )
                log.info("Auto Scaling group %s desired capacity -> %d", self._group, wanted)
        except Exception as exc:  # botocore's errors, a throttle: the tick goes on, the alarm comes later
            log.warning("could not start instances in %s: %s", self._group, exc)

    async def capacity(self) -> Capacity:
        reply = await asyncio.to_thread(
            self._ecs.describe_services, cluster=self._cluster, services=[self._service]
        )
        service = reply["services"][0]
        self._last_set = int(service["desiredCount"])
        return Capacity(desired=self._last_set, running=int(service["runningCount"]))

    async def aclose(self) -> None:
        """Leaves the service as it is: another manager takes over the scaling."""
