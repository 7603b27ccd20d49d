"""The warm pool's stopped instances go back to gp3's baseline, against moto's EC2 and Auto Scaling."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from contract.launch_volume import (
    GP3_BASELINE_IOPS,
    GP3_BASELINE_THROUGHPUT_MIB_S,
    LAUNCH_IOPS,
    LAUNCH_THROUGHPUT_MIB_S,
)
from manager.providers.ecs import EcsProvider
from manager.providers.warm_volumes import WarmVolumes

REGION = "eu-west-1"
BASELINE = (GP3_BASELINE_IOPS, GP3_BASELINE_THROUGHPUT_MIB_S)
LAUNCHED = (LAUNCH_IOPS, LAUNCH_THROUGHPUT_MIB_S)


@pytest.fixture
def ec2() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


def group_instances(ec2: Any, name: str, count: int) -> list[str]:
    """`count` running instances of a new Auto Scaling group, which tags them with its name."""
    template = ec2.create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "g5.xlarge"}
    )["LaunchTemplate"]["LaunchTemplateId"]
    boto3.client("autoscaling", region_name=REGION).create_auto_scaling_group(
        AutoScalingGroupName=name, LaunchTemplate={"LaunchTemplateId": template},
        MinSize=0, MaxSize=count, DesiredCapacity=count, AvailabilityZones=[f"{REGION}a"],
    )  # fmt: skip
    filters = [{"Name": "tag:aws:autoscaling:groupName", "Values": [name]}]
    reservations = ec2.describe_instances(Filters=filters)["Reservations"]
    return [instance["InstanceId"] for r in reservations for instance in r["Instances"]]


def launch_volume(ec2: Any, instance: str) -> str:
    """A root volume as the launch templates make it (contract/launch_volume.py), on `instance`."""
    volume = ec2.create_volume(
        AvailabilityZone=f"{REGION}a", Size=60, VolumeType="gp3", Iops=LAUNCH_IOPS,
        Throughput=LAUNCH_THROUGHPUT_MIB_S,
    )["VolumeId"]  # fmt: skip
    ec2.attach_volume(VolumeId=volume, InstanceId=instance, Device="/dev/xvdb")
    return str(volume)


def performance(ec2: Any, volume: str) -> tuple[int, int]:
    (found,) = ec2.describe_volumes(VolumeIds=[volume])["Volumes"]
    return int(found["Iops"]), int(found["Throughput"])


def test_only_the_stopped_instances_of_the_workers_groups_go_back_to_the_baseline(ec2: Any):
    stopped, running = group_instances(ec2, "warm-asg", 2)
    (elsewhere,) = group_instances(ec2, "someone-elses-asg", 1)
    ec2.stop_instances(InstanceIds=[stopped, elsewhere])
    volumes = {instance: launch_volume(ec2, instance) for instance in (stopped, running, elsewhere)}

    lowered = WarmVolumes(ec2, ("warm-asg", "burst-asg")).lower_stopped()

    assert lowered == [volumes[stopped]]
    assert performance(ec2, volumes[stopped]) == BASELINE
    assert performance(ec2, volumes[running]) == LAUNCHED  # a running instance may be pulling an image
    assert performance(ec2, volumes[elsewhere]) == LAUNCHED  # not one of ours
    assert WarmVolumes(ec2, ("warm-asg",)).lower_stopped() == []  # the next pass has nothing left to do


def test_no_stopped_instance_means_no_volume_call(ec2: Any):
    (running,) = group_instances(ec2, "warm-asg", 1)
    launch_volume(ec2, running)
    calls: list[str] = []
    ec2.meta.events.register("before-call.ec2.*", lambda model, **_: calls.append(model.name))
    assert WarmVolumes(ec2, ("warm-asg",)).lower_stopped() == []
    assert calls == ["DescribeInstances"]


class Refusal:
    """What botocore reads as EC2's error answer to a call (a `before-call` handler's reply)."""

    status_code = 400

    def __init__(self, code: str) -> None:
        self.parsed = {"Error": {"Code": code, "Message": f"refused: {code}"}}


@pytest.mark.parametrize("code", ["IncorrectModificationState", "UnauthorizedOperation"])
def test_a_refused_modification_is_logged_and_left_for_the_next_pass(
    ec2: Any, code: str, caplog: pytest.LogCaptureFixture
):
    (stopped,) = group_instances(ec2, "warm-asg", 1)
    ec2.stop_instances(InstanceIds=[stopped])
    volume = launch_volume(ec2, stopped)
    refusal = Refusal(code)

    def refuse(**_: Any) -> tuple[Refusal, dict[str, Any]]:
        return refusal, refusal.parsed

    ec2.meta.events.register("before-call.ec2.ModifyVolume", refuse)

    caplog.set_level(logging.INFO, logger="manager.providers.warm_volumes")
    assert WarmVolumes(ec2, ("warm-asg",)).lower_stopped() == []
    (record,) = [r for r in caplog.records if volume in r.getMessage()]
    if code == "IncorrectModificationState":  # a modification under way: nothing wrong
        assert record.levelno == logging.INFO and "still under way" in record.getMessage()
    else:
        assert record.levelno == logging.WARNING and code in record.getMessage()

    ec2.meta.events.unregister("before-call.ec2.ModifyVolume", refuse)
    assert WarmVolumes(ec2, ("warm-asg",)).lower_stopped() == [volume]
    assert performance(ec2, volume) == BASELINE


def test_a_pass_runs_at_most_once_an_interval():
    now = [0.0]
    volumes = WarmVolumes(None, ("warm-asg",), interval_s=60, clock=lambda: now[0])
    assert volumes.due()
    now[0] = 59
    assert not volumes.due()
    now[0] = 60
    assert volumes.due()


def workers_service() -> Any:
    ecs = boto3.client("ecs", region_name=REGION)
    ecs.create_cluster(clusterName="synapse")
    container = {"name": "worker", "image": "triton", "memory": 64}
    ecs.register_task_definition(family="worker", containerDefinitions=[container])
    ecs.create_service(cluster="synapse", serviceName="workers", taskDefinition="worker", desiredCount=0)
    return ecs


async def test_the_ecs_provider_lowers_them_on_its_ticks(ec2: Any):
    (stopped,) = group_instances(ec2, "warm-asg", 1)
    ec2.stop_instances(InstanceIds=[stopped])
    volume = launch_volume(ec2, stopped)
    provider = EcsProvider(
        workers_service(), "synapse", "workers", boto3.client("autoscaling", region_name=REGION),
        ("warm-asg",), volumes=WarmVolumes(ec2, ("warm-asg",)),
    )  # fmt: skip
    try:
        await provider.set_desired(0)  # a tick at zero, as the leader's autoscaler runs them
        assert provider.lowering is not None
        await asyncio.wait_for(asyncio.shield(provider.lowering), timeout=30)
        assert performance(ec2, volume) == BASELINE
    finally:
        await provider.aclose()


class HungEc2:
    """An EC2 client whose every call waits until the test lets it answer (nothing stopped)."""

    def __init__(self) -> None:
        self.answer = threading.Event()

    def get_paginator(self, _name: str) -> Any:
        hung = self

        class Pages:
            def paginate(self, **_: Any) -> list[dict[str, Any]]:
                hung.answer.wait(timeout=30)
                return [{"Reservations": []}]

        return Pages()


async def test_a_hung_pass_holds_up_neither_the_ticks_nor_a_second_pass(ec2: Any):
    now = [0.0]
    hung = HungEc2()
    volumes = WarmVolumes(hung, ("warm-asg",), interval_s=60, clock=lambda: now[0])
    provider = EcsProvider(workers_service(), "synapse", "workers", volumes=volumes)
    try:
        await asyncio.wait_for(provider.set_desired(1), timeout=5)  # the pass hangs beside the tick
        first = provider.lowering
        now[0] = 120  # a pass is due again, but the first has not ended: no second one
        await asyncio.wait_for(provider.set_desired(2), timeout=5)
        assert provider.lowering is first and first is not None and not first.done()
        hung.answer.set()
        await asyncio.wait_for(asyncio.shield(first), timeout=30)
    finally:
        hung.answer.set()
        await provider.aclose()
