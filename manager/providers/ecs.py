"""Workers as tasks of the GPU worker service on ECS: the provider sets the service's desired count.

The EC2 Auto Scaling group behind the service's capacity provider (and its warm pool of stopped,
pre-initialised instances) follows the tasks. ECS managed scaling alone reacts through a CloudWatch
alarm on its CapacityProviderReservation metric, published once a minute: one to two minutes before a
warm-pool instance is even asked to start
(https://docs.aws.amazon.com/AmazonECS/latest/developerguide/cluster-auto-scaling.html). So when the
manager asks for more workers than the groups have instances, it raises their desired capacity itself
(SetDesiredCapacity, without cool-down), a worker task taking an instance's one GPU. The groups fill in
the order the service's capacity provider strategy places tasks: the warm group's base first, then the
burst group. It only ever raises them: scaling in, and which instance goes, stay with managed scaling and
its termination protection, which never stops an instance that runs a task. With the groups known, it
also keeps the warm pool's stopped instances' volumes at gp3's baseline (manager/providers/warm_volumes.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import boto3
from botocore.config import Config

from contract.settings import Settings
from contract.time_limit import stop
from manager.providers.capacity import Capacity
from manager.providers.warm_volumes import WarmVolumes

log = logging.getLogger(__name__)

# A pass over the warm pool's volumes runs in a thread that a cancel cannot stop, and the process waits for
# it at exit: bounded calls, so a hung EC2 endpoint holds neither the next pass nor a manager's shutdown.
EC2_TIMEOUTS = Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 3, "mode": "standard"})


class EcsProvider:
    def __init__(
        self,
        client: Any,
        cluster: str,
        service: str,
        autoscaling: Any = None,
        groups: tuple[str, ...] = (),
        *,
        volumes: WarmVolumes | None = None,
    ) -> None:
        self._ecs = client
        self._cluster = cluster
        self._service = service
        self._autoscaling = autoscaling
        self._groups = groups
        self._volumes = volumes
        self._lowering: asyncio.Task[None] | None = None
        self._last_set: int | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> EcsProvider:
        if not settings.ecs_cluster or not settings.ecs_worker_service:
            raise ValueError("the ecs provider needs SYNAPSE_ECS_CLUSTER and SYNAPSE_ECS_WORKER_SERVICE")
        groups = settings.ecs_worker_asgs
        autoscaling = boto3.client("autoscaling") if groups else None
        volumes = WarmVolumes(boto3.client("ec2", config=EC2_TIMEOUTS), groups) if groups else None
        cluster, service = settings.ecs_cluster, settings.ecs_worker_service
        return cls(boto3.client("ecs"), cluster, service, autoscaling, groups, volumes=volumes)

    async def set_desired(self, count: int) -> None:
        self._keep_warm_volumes_at_baseline()
        if count == self._last_set:
            return  # one UpdateService per change, not per tick
        await asyncio.to_thread(
            self._ecs.update_service, cluster=self._cluster, service=self._service, desiredCount=count
        )
        log.info("ECS service %s desired count -> %d", self._service, count)
        raised = self._last_set is None or count > self._last_set
        self._last_set = count
        if raised and self._groups:
            await asyncio.to_thread(self._start_instances, count)

    def _start_instances(self, count: int) -> None:
        """Gives the groups `count` instances in all, each in turn up to its maximum, raising a group's
        desired capacity where it is lower; a failure is logged, since managed scaling's alarm still brings
        the instances, later."""
        try:
            reply = self._autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=list(self._groups))
            found = {group["AutoScalingGroupName"]: group for group in reply["AutoScalingGroups"]}
            left = count
            for name in self._groups:
                group = found[name]
                wanted = min(left, int(group["MaxSize"]))
                left -= wanted
                if wanted > int(group["DesiredCapacity"]):
                    self._autoscaling.set_desired_capacity(
                        AutoScalingGroupName=name, DesiredCapacity=wanted, HonorCooldown=False
                    )
                    log.info("Auto Scaling group %s desired capacity -> %d", name, wanted)
        except Exception as exc:  # botocore's errors, a throttle, a group gone: the alarm comes later
            log.warning("could not start instances in %s: %s", ", ".join(self._groups), exc)

    def _keep_warm_volumes_at_baseline(self) -> None:
        """Once an interval, a pass over the stopped warm-pool instances' volumes, beside the ticks: its
        API calls never hold up a scaling decision, and one pass runs at a time."""
        if self._volumes is None or (self._lowering is not None and not self._lowering.done()):
            return
        if self._volumes.due():
            self._lowering = asyncio.create_task(self._lower_pass(self._volumes), name="warm-volumes")

    @property
    def lowering(self) -> asyncio.Task[None] | None:
        """The pass over the warm pool's volumes under way or last run, if any."""
        return self._lowering

    @staticmethod
    async def _lower_pass(volumes: WarmVolumes) -> None:
        """The pass logs what EC2 refuses; anything else is logged here, not lost with the task."""
        try:
            await asyncio.to_thread(volumes.lower_stopped)
        except Exception:
            log.exception("the pass over the warm pool's volumes failed; the next one runs in a minute")

    async def capacity(self) -> Capacity:
        reply = await asyncio.to_thread(
            self._ecs.describe_services, cluster=self._cluster, services=[self._service]
        )
        service = reply["services"][0]
        self._last_set = int(service["desiredCount"])
        return Capacity(desired=self._last_set, running=int(service["runningCount"]))

    async def aclose(self) -> None:
        """Stops a pass over the warm pool's volumes; leaves the service as it is: another manager takes
        over the scaling."""
        if self._lowering is not None:
            await stop(self._lowering)
