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
