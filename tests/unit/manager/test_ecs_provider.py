"""The ECS provider against moto: the scaling decisions of a scripted load become UpdateService calls."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from manager.autoscaling import Autoscaler, LoadSnapshot, ScalingLimits
from manager.providers.ecs import EcsProvider


@pytest.fixture
def ecs() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("ecs", region_name="eu-west-1")
        client.create_cluster(clusterName="synapse")
        client.register_task_definition(
            family="worker", containerDefinitions=[{"name": "worker", "image": "triton", "memory": 1024}]
        )
        client.create_service(
            cluster="synapse", serviceName="workers", taskDefinition="worker", desiredCount=0
        )
        yield client


async def test_a_scripted_load_pattern_sets_the_service_desired_count(ecs: Any):
    calls: list[int] = []
    ecs.meta.events.register(
        "provide-client-params.ecs.UpdateService", lambda params, **_: calls.append(params["desiredCount"])
    )
    provider = EcsProvider(ecs, "synapse", "workers")
    policy = Autoscaler(ScalingLimits(max_workers=4, latency_budget_s=0.15, scale_to_zero_after_s=300,
                                      scale_down_cooldown_s=60))  # fmt: skip
    script = [  # (time s, backlog, busy ratio, throughput jobs/s)
        (0, 0, 0.0, 0.0),  # nothing to do: no call
        (1, 50, 0.0, 0.0),  # first jobs: from zero to one
        (2, 50, 0.0, 0.0),  # worker still starting: no new call
        (5, 450, 0.9, 1000.0),  # backlog needs 3 workers within 150 ms
        (6, 0, 0.9, 1000.0),  # drained, still busy: steady
        (100, 0, 0.1, 1000.0),  # idle for a cool-down: one fewer
        (400, 0, 0.0, 1000.0),  # no jobs for 300 s: to zero
    ]
    last_job = None
    for now, backlog, busy, throughput in script:
        last_job = now if backlog else last_job
        capacity = await provider.capacity()
        snapshot = LoadSnapshot(now=now, backlog=backlog, running=capacity.desired, throughput=throughput,
                                busy_ratio=busy, last_job_at=last_job)  # fmt: skip
        await provider.set_desired(policy.decide(snapshot, capacity.desired).desired)

    assert calls == [1, 3, 2, 0]
    service = ecs.describe_services(cluster="synapse", services=["workers"])["services"][0]
    assert service["desiredCount"] == 0


async def test_setting_the_same_count_twice_calls_ecs_once(ecs: Any):
    calls: list[int] = []
    ecs.meta.events.register(
        "provide-client-params.ecs.UpdateService", lambda params, **_: calls.append(params["desiredCount"])
    )
    provider = EcsProvider(ecs, "synapse", "workers")
    await provider.set_desired(2)
    await provider.set_desired(2)
    assert calls == [2]
    assert (await provider.capacity()).desired == 2


def make_group(autoscaling: Any, name: str, max_size: int) -> None:
    """An empty Auto Scaling group, as at zero, of at most `max_size` instances."""
    ec2 = boto3.client("ec2", region_name="eu-west-1")
    template = ec2.create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "g5.xlarge"}
    )["LaunchTemplate"]["LaunchTemplateId"]
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name, LaunchTemplate={"LaunchTemplateId": template},
        MinSize=0, MaxSize=max_size, DesiredCapacity=0, AvailabilityZones=["eu-west-1a"],
    )  # fmt: skip


@pytest.fixture
def workers_group(ecs: Any) -> Iterator[Any]:
    """The worker service's one Auto Scaling group, at most 3 instances."""
    client = boto3.client("autoscaling", region_name="eu-west-1")
    make_group(client, "workers-asg", 3)
    yield client


def desired_instances(autoscaling: Any, name: str = "workers-asg") -> int:
    groups = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])
    return int(groups["AutoScalingGroups"][0]["DesiredCapacity"])


async def test_asking_for_workers_starts_instances_at_once_and_never_stops_any(ecs: Any, workers_group: Any):
    provider = EcsProvider(ecs, "synapse", "workers", workers_group, ("workers-asg",))
    await provider.set_desired(1)  # a job at zero: an instance starts without waiting for the alarm
    assert desired_instances(workers_group) == 1
    await provider.set_desired(5)  # more than the group may hold: its maximum
    assert desired_instances(workers_group) == 3
    await provider.set_desired(0)  # scaling in is managed scaling's, with its termination protection
    assert desired_instances(workers_group) == 3


async def test_workers_past_the_warm_group_start_burst_instances_at_once(ecs: Any):
    """The warm group (one instance) takes the first worker, the burst group every further one: a third
    worker starts two burst instances without waiting for managed scaling's alarm."""
    autoscaling = boto3.client("autoscaling", region_name="eu-west-1")
    make_group(autoscaling, "warm-asg", 1)
    make_group(autoscaling, "burst-asg", 4)
    provider = EcsProvider(ecs, "synapse", "workers", autoscaling, ("warm-asg", "burst-asg"))
    await provider.set_desired(1)
    assert (desired_instances(autoscaling, "warm-asg"), desired_instances(autoscaling, "burst-asg")) == (1, 0)
    await provider.set_desired(3)
    assert (desired_instances(autoscaling, "warm-asg"), desired_instances(autoscaling, "burst-asg")) == (1, 2)
    await provider.set_desired(9)  # past both groups: each at its maximum
    assert (desired_instances(autoscaling, "warm-asg"), desired_instances(autoscaling, "burst-asg")) == (1, 4)


async def test_a_refused_instance_request_leaves_the_service_scaled(ecs: Any):
    provider = EcsProvider(
        ecs, "synapse", "workers", boto3.client("autoscaling", region_name="eu-west-1"), ("gone",)
    )
    await provider.set_desired(2)  # no such group: logged, and managed scaling's alarm still follows
    assert (await provider.capacity()).desired == 2
