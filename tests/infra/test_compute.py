"""The manager on Fargate and the GPU workers: warm pool, scale from zero, least-privilege scaling."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from tests.infra import cfn

pytestmark = pytest.mark.infra


def test_gpu_group_starts_empty_and_is_capped_at_max_workers(
    platform: Any, raw: dict[str, dict[str, Any]]
) -> None:
    group = cfn.only(raw["workers"], "AWS::AutoScaling::AutoScalingGroup")
    assert group["MinSize"] == "0"
    assert group["MaxSize"] == str(platform.config.max_workers)


def test_warm_pool_keeps_stopped_instances(platform: Any, templates: dict[str, Template]) -> None:
    size = platform.config.warm_pool_size
    templates["workers"].has_resource_properties(
        "AWS::AutoScaling::WarmPool",
        {
            "PoolState": "Stopped",
            "MinSize": size,
            "MaxGroupPreparedCapacity": size,
            "InstanceReusePolicy": {"ReuseOnScaleIn": True},
        },
    )


def user_data(raw: dict[str, dict[str, Any]]) -> str:
    template = cfn.only(raw["workers"], "AWS::EC2::LaunchTemplate")["LaunchTemplateData"]
    parts = template["UserData"]["Fn::Base64"]["Fn::Join"][1]
    return "".join(part if isinstance(part, str) else "<ref>" for part in parts)


def test_warm_instances_pull_the_worker_image_before_they_stop(raw: dict[str, dict[str, Any]]) -> None:
    script = user_data(raw)
    assert "ECS_WARM_POOLS_CHECK=true" in script  # no tasks land on an instance headed for the pool
    assert "ECS_IMAGE_PULL_BEHAVIOR=prefer-cached" in script
    assert 'docker pull --quiet "$IMAGE"' in script
    assert "complete-lifecycle-action" in script
    hook = cfn.only(raw["workers"], "AWS::AutoScaling::LifecycleHook")
    assert hook["LifecycleTransition"] == "autoscaling:EC2_INSTANCE_LAUNCHING"
    assert hook["DefaultResult"] == "CONTINUE"


def test_gpu_instances_use_the_ecs_gpu_ami_and_the_configured_type(
    platform: Any, raw: dict[str, dict[str, Any]]
) -> None:
    data = cfn.only(raw["workers"], "AWS::EC2::LaunchTemplate")["LaunchTemplateData"]
    assert data["InstanceType"] == platform.config.instance_type
    parameter = raw["workers"]["Parameters"][data["ImageId"]["Ref"]]
    assert parameter["Default"] == "/aws/service/ecs/optimized-ami/amazon-linux-2/gpu/recommended/image_id"
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert all(mapping["Ebs"]["Encrypted"] for mapping in data["BlockDeviceMappings"])


def test_worker_service_starts_at_zero_on_the_gpu_capacity_provider(templates: dict[str, Template]) -> None:
    templates["workers"].has_resource_properties(
        "AWS::ECS::Service",
        {
            "DesiredCount": 0,
            "CapacityProviderStrategy": [Match.object_like({"CapacityProvider": Match.any_value()})],
        },
    )
    templates["workers"].has_resource_properties(
        "AWS::ECS::CapacityProvider",
        {
            "AutoScalingGroupProvider": Match.object_like(
                {"ManagedScaling": Match.object_like({"Status": "ENABLED", "TargetCapacity": 100})}
            )
        },
    )


def test_worker_task_asks_for_one_gpu_and_runs_synapse_worker(raw: dict[str, dict[str, Any]]) -> None:
    worker = cfn.container(raw["workers"], "worker")
    assert worker["ResourceRequirements"] == [{"Type": "GPU", "Value": "1"}]
    assert worker["Command"] == ["python3", "-m", "worker_image"]
    assert [m["ContainerPort"] for m in worker["PortMappings"]] == [8000, 8001, 8002]
    assert [s["Name"] for s in worker["Secrets"]] == ["SYNAPSE_REDIS_AUTH_TOKEN"]
    env = cfn.environment(worker)
    assert env["SYNAPSE_PUSHGATEWAY_URL"] == "http://pushgateway.synapse.internal:9091"
    assert env["SYNAPSE_WORKER_ADVERTISE_HOST"] == "ecs-metadata"
    assert env["SYNAPSE_TRITON_BIND_HOST"] == "0.0.0.0"


def test_triton_ports_are_open_to_the_manager_only(raw: dict[str, dict[str, Any]]) -> None:
    triton_rules = [
        rule
        for stack, template in raw.items()
        for rule in cfn.ingress_rules(stack, template)
        if "WorkersSecurityGroup" in rule.target
    ]
    assert [(r.stack, r.from_port, r.to_port) for r in triton_rules] == [("manager", 8000, 8002)]
    assert "ManagerSecurityGroup" in triton_rules[0].source


def test_manager_runs_at_least_one_fargate_task(raw: dict[str, dict[str, Any]]) -> None:
    service = cfn.only(raw["manager"], "AWS::ECS::Service")
    assert service["DesiredCount"] >= 1
    assert service["LaunchType"] == "FARGATE"
    manager = cfn.container(raw["manager"], "manager")
    assert manager["Command"] == ["python", "-m", "manager"]
    assert [s["Name"] for s in manager["Secrets"]] == ["SYNAPSE_REDIS_AUTH_TOKEN"]
    env = cfn.environment(manager)
    assert env["SYNAPSE_WORKER_PROVIDER"] == "ecs"
    assert {"SYNAPSE_ECS_CLUSTER", "SYNAPSE_ECS_WORKER_SERVICE", "SYNAPSE_REDIS_URL"} <= env.keys()
    assert env["SYNAPSE_METRICS_PORT"] == "9100"


def test_manager_may_change_only_the_worker_service(raw: dict[str, dict[str, Any]]) -> None:
    task_role = [
        statement
        for statement in cfn.policy_statements("manager", raw["manager"])
        if statement.policy.startswith("ManagerTaskDefinitionTaskRole")
    ]
    assert len(task_role) == 1
    (statement,) = task_role
    assert sorted(statement.actions) == ["ecs:DescribeServices", "ecs:UpdateService"]
    assert len(statement.resources) == 1
    assert "WorkersService" in statement.resources[0]
    assert "*" not in statement.resources[0]


def test_no_policy_grants_every_action_of_a_service(raw: dict[str, dict[str, Any]]) -> None:
    for stack, template in raw.items():
        for statement in cfn.policy_statements(stack, template):
            for action in statement.actions:
                assert action != "*" and not action.endswith(":*"), (stack, statement)
