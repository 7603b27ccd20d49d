"""The manager on Fargate and the GPU workers: warm pool, scale from zero, least-privilege scaling."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template

from contract.launch_volume import (
    GP3_MIB_S_PER_IOPS,
    IMAGE_EXTRACTION_MIB_S,
    LAUNCH_IOPS,
    LAUNCH_THROUGHPUT_MIB_S,
    VOLUME_INITIALIZATION_RATE_MIB_S,
)
from contract.settings import Settings
from manager.service import HEALTHZ_PATH
from stacks.config import METRICS_PORT, TRITON_HTTP_PORT, SynapseConfig
from stacks.manager_service import MANAGER_DOCKERFILE
from stacks.workers import (
    AGENT_ALIVE_GLOB,
    AGENT_ALIVE_MAX_AGE_S,
    PREWARM_CLI_INSTALL_S,
    PREWARM_HOOK,
    PREWARM_PULL_TIMEOUT_S,
    PREWARM_STATE_WAIT_S,
)
from tests.infra import cfn
from tests.infra.synthesis import Synth
from tests.processes import REPO
from worker_image.agent import ALIVE_FILE

pytestmark = pytest.mark.infra


def groups(raw: dict[str, dict[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The GPU Auto Scaling groups' properties by logical id: the warm group, then the burst group."""
    return {
        logical_id: resource["Properties"]
        for logical_id, resource in cfn.resources(
            raw["workers"], "AWS::AutoScaling::AutoScalingGroup"
        ).items()
    }


def warm_and_burst(raw: dict[str, dict[str, Any]]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    by_id = groups(raw)
    (warm,) = (group for logical_id, group in by_id.items() if "WarmGroup" in logical_id)
    (burst,) = (group for logical_id, group in by_id.items() if "BurstGroup" in logical_id)
    return warm, burst


def launch_template_id(group: Mapping[str, Any]) -> str:
    """The logical id of the launch template a group launches from (directly, or in its mixed policy)."""
    spec = (
        group.get("LaunchTemplate")
        or group["MixedInstancesPolicy"]["LaunchTemplate"]["LaunchTemplateSpecification"]
    )
    reference: str = spec["LaunchTemplateId"]["Ref"]
    return reference


def launch_templates(raw: dict[str, dict[str, Any]]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """The warm group's and the burst group's launch template data."""
    resources = raw["workers"]["Resources"]
    warm, burst = (resources[launch_template_id(group)] for group in warm_and_burst(raw))
    return warm["Properties"]["LaunchTemplateData"], burst["Properties"]["LaunchTemplateData"]


def root_volume(data: Mapping[str, Any]) -> Mapping[str, Any]:
    (mapping,) = data["BlockDeviceMappings"]
    assert mapping["DeviceName"] == "/dev/xvda"
    volume: Mapping[str, Any] = mapping["Ebs"]
    return volume


def test_gpu_groups_start_empty_and_together_are_capped_at_max_workers(
    platform: Any, raw: dict[str, dict[str, Any]]
) -> None:
    warm, burst = warm_and_burst(raw)
    assert warm["MinSize"] == burst["MinSize"] == "0"
    assert warm["MaxSize"] == str(platform.config.warm_pool_size)
    assert int(warm["MaxSize"]) + int(burst["MaxSize"]) == platform.config.max_workers


def test_the_warm_group_is_one_type_on_demand_since_a_warm_pool_takes_no_mix_and_no_spot(
    platform: Any, opted_in_raw: dict[str, dict[str, Any]]
) -> None:
    warm, _ = warm_and_burst(opted_in_raw)
    assert "MixedInstancesPolicy" not in warm
    for data in launch_templates(opted_in_raw):
        assert "InstanceMarketOptions" not in data  # neither launch template asks for Spot
    assert launch_templates(opted_in_raw)[0]["InstanceType"] == platform.config.instance_types[0]


def test_the_burst_group_mixes_every_instance_type_on_demand_by_default(
    platform: Any, raw: dict[str, dict[str, Any]]
) -> None:
    _, burst = warm_and_burst(raw)
    policy = burst["MixedInstancesPolicy"]
    types = [o["InstanceType"] for o in policy["LaunchTemplate"]["Overrides"]]
    assert types == list(platform.config.instance_types) and len(set(types)) >= 2
    distribution = policy["InstancesDistribution"]
    assert distribution["OnDemandPercentageAboveBaseCapacity"] == 100
    assert distribution["OnDemandAllocationStrategy"] == "prioritized"
    assert burst["CapacityRebalance"] is False


def test_spot_is_behind_its_flag_with_capacity_rebalancing_and_draining(
    opted_in_raw: dict[str, dict[str, Any]],
) -> None:
    _, burst = warm_and_burst(opted_in_raw)
    distribution = burst["MixedInstancesPolicy"]["InstancesDistribution"]
    assert distribution["OnDemandPercentageAboveBaseCapacity"] == 0
    assert distribution["SpotAllocationStrategy"] == "price-capacity-optimized"
    assert burst["CapacityRebalance"] is True
    # The agent drains an instance on its two-minute notice, so its worker task is stopped and replaced.
    assert "ECS_ENABLE_SPOT_INSTANCE_DRAINING=true" in user_data(opted_in_raw)


def test_every_gpu_group_spans_every_zone_of_the_vpc(
    opted_in: Any, opted_in_raw: dict[str, dict[str, Any]]
) -> None:
    zones = opted_in.platform.config.availability_zones
    assert len(zones) == 3  # tests/infra/conftest.py: OPTED_IN
    for group in groups(opted_in_raw).values():
        assert len(group["VPCZoneIdentifier"]) == len(zones)


def test_warm_pool_keeps_stopped_instances_and_never_reuses_scaled_in_ones(
    platform: Any, templates: dict[str, Template]
) -> None:
    size = platform.config.warm_pool_size
    templates["workers"].has_resource_properties(
        "AWS::AutoScaling::WarmPool",
        {
            "PoolState": "Stopped",
            "MinSize": size,
            "MaxGroupPreparedCapacity": size,
            # Not supported with ECS capacity providers (ECS documentation, warm pools).
            "InstanceReusePolicy": {"ReuseOnScaleIn": False},
        },
    )


def test_lean_keeps_one_warm_instance_and_production_two(platform: Any) -> None:
    assert platform.config.profile == "lean" and platform.config.warm_pool_size == 1
    assert SynapseConfig.from_context(cdk.App(context={"synapse:profile": "production"})).warm_pool_size == 2


def test_the_warm_pool_waits_for_the_prewarm_hook(raw: dict[str, dict[str, Any]]) -> None:
    (hook_id,) = (h for h in cfn.resources(raw["workers"], "AWS::AutoScaling::LifecycleHook") if "Warm" in h)
    (pool,) = cfn.resources(raw["workers"], "AWS::AutoScaling::WarmPool").values()
    assert hook_id in pool.get("DependsOn", [])


def test_the_prewarm_hook_holds_an_instance_no_longer_than_prewarm_may_take(
    raw: dict[str, dict[str, Any]],
) -> None:
    script = (REPO / "stacks" / "prewarm.sh").read_text()
    limits = {"STATE_WAIT_S": PREWARM_STATE_WAIT_S, "CLI_INSTALL_S": PREWARM_CLI_INSTALL_S}
    limits["PULL_TIMEOUT_S"] = PREWARM_PULL_TIMEOUT_S
    for name, value in limits.items():
        assert f"{name}={value}" in user_data(raw)  # prewarm.env, which the script sources
        assert f"${name}" in script or f"${{{name}}}" in script or f"{name} /" in script, name
    (hook,) = cfn.resources(raw["workers"], "AWS::AutoScaling::LifecycleHook").values()
    assert hook["Properties"]["HeartbeatTimeout"] == sum(limits.values()) + 60 < 30 * 60


def test_only_the_warm_group_holds_its_instances_in_a_launch_hook(raw: dict[str, dict[str, Any]]) -> None:
    """A burst instance never enters a warm pool: nothing to pull before it is in service, so no hook holds
    it, and no release to hand off."""
    hooks = cfn.resources(raw["workers"], "AWS::AutoScaling::LifecycleHook")
    warm, burst = (next(i for i in groups(raw) if f"{name}Group" in i) for name in ("Warm", "Burst"))
    assert [h["Properties"]["AutoScalingGroupName"] for h in hooks.values()] == [{"Ref": warm}]
    assert burst not in json.dumps(hooks)


STUB_TOOLS = ("curl", "dnf", "aws", "docker", "systemctl", "systemd-cat", "systemd-run", "sleep")


def prewarm_env(raw: dict[str, dict[str, Any]], group: str) -> str:
    """The prewarm.env a group's user data writes (CloudFormation references stood in by `x`)."""
    script = user_data(raw, group)
    body = script.split("cat > /etc/synapse/prewarm.env <<EOF\n", 1)[1].split("\nEOF", 1)[0]
    return body.replace("<ref>", "x") + "\n"


def run_prewarm(
    tmp_path: Path,
    env: str,
    *args: str,
    state: str = "InService",
    aws_installed: bool = True,
    release_failures: int = 0,
) -> tuple[int, list[str]]:
    """Runs stacks/prewarm.sh as cloud-init does (or with `args`, as its release unit does) against stub
    tools that answer like the instance metadata service, the AWS CLI and dnf; returns its exit status and
    what it called, in order: one line per call, the tool's name and its arguments. The first
    `release_failures` CompleteLifecycleAction calls fail."""
    calls, bin_dir = tmp_path / "calls", tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "release_failures").write_text(str(release_failures))
    aws = f"""#!/bin/bash
echo "aws $*" >> {calls}
case "$*" in
  *describe-auto-scaling-instances*) echo synapse-warm-group ;;
  *get-login-password*) echo secret ;;
  *complete-lifecycle-action*) left=$(cat {tmp_path}/release_failures)
    [ "$left" -gt 0 ] && echo $((left - 1)) > {tmp_path}/release_failures && exit 1 ;;
esac
exit 0
"""
    stubs = {tool: f'#!/bin/bash\necho "{tool} $*" >> {calls}\n' for tool in STUB_TOOLS}
    stubs["systemd-cat"] = f'#!/bin/bash\necho "systemd-cat $* $(cat)" >> {calls}\n'
    # docker login reads the password from its stdin as the real one does: a stub that exits unread
    # lets the AWS CLI's `echo` die of SIGPIPE now and then, and pipefail then skips the pull.
    stubs["docker"] = (
        f'#!/bin/bash\nsecret=""\n[[ "$*" == *--password-stdin* ]] && secret=" <$(cat)>"\n'
        f'echo "docker $*$secret" >> {calls}\n'
    )
    stubs["curl"] += (
        f'case "$*" in *api/token*) echo token ;; *target-lifecycle-state*) echo "{state}" ;; '
        "*instance-id*) echo i-0abc ;; esac\n"
    )
    stubs["aws"] = aws
    if not aws_installed:
        del stubs["aws"]
        stubs["dnf"] += f"cat > {bin_dir}/aws <<'EOF'\n{aws}EOF\nchmod +x {bin_dir}/aws\n"
    for tool, text in stubs.items():
        (bin_dir / tool).write_text(text)
        (bin_dir / tool).chmod(0o755)
    env_file = tmp_path / "prewarm.env"
    env_file.write_text(env)
    script = (REPO / "stacks" / "prewarm.sh").read_text().replace("/etc/synapse/prewarm.env", str(env_file))
    (tmp_path / "prewarm.sh").write_text(script)
    done = subprocess.run(
        ["bash", str(tmp_path / "prewarm.sh"), *args],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        timeout=30,
        check=False,
    )
    return done.returncode, calls.read_text().splitlines() if calls.exists() else []


def called(calls: list[str], tool: str) -> list[str]:
    return [call for call in calls if call.split()[0] == tool]


def test_prewarm_ends_at_once_on_an_instance_of_a_group_without_the_hook(
    raw: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """The burst group's prewarm.env: the script exits 0 and asks nothing of the instance metadata, dnf or
    the AWS CLI, so the ECS agent (ordered after cloud-init) starts."""
    assert run_prewarm(tmp_path, prewarm_env(raw, "burst")) == (0, [])


def test_an_instance_headed_into_service_leaves_the_hook_s_release_to_a_unit_of_its_own(
    raw: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """Out of the pool, or launched straight in while it refills: the script reads the target state (so
    the agent, which starts after it, finds one) and hands the release to a transient unit, without
    installing the CLI or calling AWS first: the agent does not wait for the hook."""
    status, calls = run_prewarm(tmp_path, prewarm_env(raw, "warm"), state="InService", aws_installed=False)
    assert status == 0
    assert any("target-lifecycle-state" in call for call in called(calls, "curl"))
    (release,) = called(calls, "systemd-run")
    assert release.endswith(f"/bin/bash {tmp_path / 'prewarm.sh'} release")
    assert not called(calls, "dnf") and not called(calls, "aws") and not called(calls, "docker")


def test_the_release_unit_installs_the_cli_and_continues_the_instance_s_launch(
    raw: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    status, calls = run_prewarm(tmp_path, prewarm_env(raw, "warm"), "release", aws_installed=False)
    assert status == 0
    assert called(calls, "dnf") == ["dnf install -y -q awscli-2"]
    *_, complete = called(calls, "aws")
    hook = f"--lifecycle-hook-name {PREWARM_HOOK} --instance-id i-0abc"
    assert f"{hook} --lifecycle-action-result CONTINUE" in complete
    assert "--auto-scaling-group-name synapse-warm-group" in complete


def test_the_release_is_tried_again_and_a_release_that_never_succeeds_fails_its_unit(
    raw: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """A hook left unreleased holds the instance until its heartbeat runs out: a failed try is repeated,
    and after the third the unit ends failed, with an error in the journal."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    env = prewarm_env(raw, "warm")
    status, calls = run_prewarm(first, env, "release", release_failures=2)
    assert status == 0
    assert len([call for call in calls if "complete-lifecycle-action" in call]) == 3
    status, calls = run_prewarm(second, env, "release", release_failures=10)
    assert status != 0
    assert len([call for call in calls if "complete-lifecycle-action" in call]) == 3
    assert any("-p err" in call and "launch hook" in call for call in called(calls, "systemd-cat"))


def test_an_instance_headed_for_the_pool_pulls_the_image_before_its_release_lets_it_stop(
    raw: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    env = prewarm_env(raw, "warm")
    status, calls = run_prewarm(tmp_path, env, state="Warmed:Stopped")
    assert status == 0
    image = next(line for line in env.splitlines() if line.startswith("IMAGE=")).removeprefix("IMAGE=")
    registry = image.split("/", 1)[0]  # the worker repository's registry, references stood in by `x`
    assert f"docker login --username AWS --password-stdin {registry} <secret>" in calls
    pull = next(i for i, call in enumerate(calls) if call.startswith("docker pull"))
    release = next(i for i, call in enumerate(calls) if "complete-lifecycle-action" in call)
    assert pull < release
    assert not called(calls, "systemd-run")


def test_only_the_manager_may_lower_volumes_and_only_the_workers_tagged_ones(
    raw: dict[str, dict[str, Any]],
) -> None:
    """The manager lowers a stopped warm-pool instance's volume (manager/providers/warm_volumes.py); the
    launch templates tag every GPU instance's volume, and the grant holds for those alone."""

    modifies = [
        statement
        for stack, template in raw.items()
        for statement in cfn.policy_statements(stack, template)
        if "ec2:ModifyVolume" in statement.actions
    ]
    (modify,) = modifies  # the manager's, and no instance role's
    assert modify.policy.startswith("ManagerTaskDefinitionTaskRole")
    assert json.loads(modify.condition) == {"StringEquals": {"aws:ResourceTag/synapse:unit": "gpu-workers"}}
    (volumes,) = modify.resources
    assert volumes.endswith(":volume/*")
    for template in launch_templates(raw):
        volume_tags = next(
            spec["Tags"] for spec in template["TagSpecifications"] if spec["ResourceType"] == "volume"
        )
        assert {"Key": "synapse:unit", "Value": "gpu-workers"} in volume_tags


def test_every_deploy_refreshes_instances_whose_launch_template_changed(
    raw: dict[str, dict[str, Any]],
) -> None:
    refreshes = [
        r["Properties"]
        for r in raw["workers"]["Resources"].values()
        if r["Type"] == "Custom::AWS" and "startInstanceRefresh" in cfn.referenced_ids(r["Properties"])
    ]
    assert len(refreshes) == len(groups(raw))
    for refresh, (group_id, group) in zip(refreshes, groups(raw).items(), strict=True):
        call = cfn.referenced_ids(refresh["Update"])
        # The group's own template's version is part of the call, so a new version calls again.
        others = set(cfn.resources(raw["workers"], "AWS::EC2::LaunchTemplate")) - {launch_template_id(group)}
        assert launch_template_id(group) in call and "LatestVersionNumber" in call and group_id in call
        assert not any(other in call for other in others)
        preferences = ("SkipMatching", "ScaleInProtectedInstances", "Refresh", "InstanceRefreshInProgress")
        for preference in preferences:
            assert preference in call, preference


def test_instances_warm_up_in_a_minute_so_billing_stops_promptly(raw: dict[str, dict[str, Any]]) -> None:
    assert all(group["DefaultInstanceWarmup"] == 60 for group in groups(raw).values())
    providers = cfn.resources(raw["workers"], "AWS::ECS::CapacityProvider").values()
    assert len(providers) == 2
    for provider in providers:
        scaling = provider["Properties"]["AutoScalingGroupProvider"]["ManagedScaling"]
        assert scaling["InstanceWarmupPeriod"] == 60


def test_launch_errors_reach_the_alerts_topic(raw: dict[str, dict[str, Any]]) -> None:
    for group in groups(raw).values():
        (notification,) = group["NotificationConfigurations"]
        assert sorted(notification["NotificationTypes"]) == [
            "autoscaling:EC2_INSTANCE_LAUNCH_ERROR",
            "autoscaling:EC2_INSTANCE_TERMINATE_ERROR",
        ]
        assert "SynapseMonitoring" in cfn.referenced_ids(notification["TopicARN"])


def user_data(raw: dict[str, dict[str, Any]], group: str = "warm") -> str:
    """A group's GPU instances' user data (the warm group's by default)."""
    warm, burst = (data["UserData"] for data in launch_templates(raw))
    parts = (warm if group == "warm" else burst)["Fn::Base64"]["Fn::Join"][1]
    return "".join(part if isinstance(part, str) else "<ref>" for part in parts)


def test_both_groups_launch_alike_but_for_what_the_warm_pool_needs(
    raw: dict[str, dict[str, Any]],
) -> None:
    warm, burst = launch_templates(raw)
    own = {"TagSpecifications", "IamInstanceProfile", "UserData"}
    assert {k: v for k, v in warm.items() if k not in own} == {k: v for k, v in burst.items() if k not in own}
    # The hook's name for prewarm.sh, and the agent's check, whose minute-long sleep when IMDS has no target
    # state yet only the warm group's prewarm.sh (which waits for the state first) spares it.
    warm_only = user_data(raw, "warm").replace(f"HOOK={PREWARM_HOOK}\n", "HOOK=\n")
    assert user_data(raw, "burst") == warm_only.replace("ECS_WARM_POOLS_CHECK=true\n", "")
    # Each template has an instance profile of its own, and both hold the one instance role.
    profiles = [
        raw["workers"]["Resources"][t["IamInstanceProfile"]["Arn"]["Fn::GetAtt"][0]] for t in (warm, burst)
    ]
    assert profiles[0]["Properties"] == profiles[1]["Properties"]
    assert "InstanceRole" in cfn.referenced_ids(profiles[0]["Properties"]["Roles"])
    assert root_volume(warm)["VolumeSize"] == root_volume(burst)["VolumeSize"]


def test_a_new_instance_s_root_volume_is_provisioned_for_its_cold_path(
    raw: dict[str, dict[str, Any]],
) -> None:
    warm, burst = launch_templates(raw)
    assert root_volume(warm) == root_volume(burst)
    volume = root_volume(burst)
    assert volume["VolumeType"] == "gp3"
    assert volume["Throughput"] == LAUNCH_THROUGHPUT_MIB_S
    assert volume["Iops"] == LAUNCH_IOPS
    assert volume["VolumeInitializationRate"] == VOLUME_INITIALIZATION_RATE_MIB_S
    # What gp3 and EBS accept: throughput at most 0.25 MiB/s per provisioned IOPS, an initialization rate of
    # 100 to 300 MiB/s; and more throughput than the extraction can use only for the download beside it.
    assert volume["Throughput"] <= volume["Iops"] * GP3_MIB_S_PER_IOPS
    assert 100 <= volume["VolumeInitializationRate"] <= 300
    assert IMAGE_EXTRACTION_MIB_S < volume["Throughput"] <= 2 * IMAGE_EXTRACTION_MIB_S


def test_warm_instances_pull_the_worker_image_before_they_stop(raw: dict[str, dict[str, Any]]) -> None:
    script = user_data(raw)
    assert "ECS_WARM_POOLS_CHECK=true" in script  # no tasks land on an instance headed for the pool
    assert "ECS_IMAGE_PULL_BEHAVIOR=prefer-cached" in script
    assert 'docker pull --quiet "$IMAGE"' in script
    assert "complete-lifecycle-action" in script
    for hook in cfn.resources(raw["workers"], "AWS::AutoScaling::LifecycleHook").values():
        assert hook["Properties"]["LifecycleTransition"] == "autoscaling:EC2_INSTANCE_LAUNCHING"
        assert hook["Properties"]["DefaultResult"] == "CONTINUE"


def test_gpu_instances_use_the_al2023_ecs_gpu_ami_and_the_configured_type(
    platform: Any, raw: dict[str, dict[str, Any]]
) -> None:
    data, burst = launch_templates(raw)
    assert data["InstanceType"] == platform.config.instance_type
    parameter = raw["workers"]["Parameters"][data["ImageId"]["Ref"]]
    assert parameter["Default"] == "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id"
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert root_volume(data)["Encrypted"] and root_volume(burst)["Encrypted"]


def test_the_root_volume_is_the_configured_size_and_the_model_cache_fits_in_it(
    platform: Any, raw: dict[str, dict[str, Any]]
) -> None:
    for data in launch_templates(raw):
        assert root_volume(data)["VolumeSize"] == platform.config.worker_disk_gb == 60
    budget = int(cfn.environment(cfn.container(raw["workers"], "worker"))["SYNAPSE_MODEL_CACHE_BYTES"])
    assert budget == platform.config.worker_model_cache_bytes < 60 * 1024**3


def test_lean_gpu_instances_get_a_public_address_in_a_public_subnet(raw: dict[str, dict[str, Any]]) -> None:
    for data in launch_templates(raw):
        (interface,) = data["NetworkInterfaces"]
        assert interface["AssociatePublicIpAddress"] is True
    for group in groups(raw).values():
        assert "publicSubnet" in cfn.referenced_ids(group["VPCZoneIdentifier"])


def test_gpu_instances_can_be_reached_with_session_manager(raw: dict[str, dict[str, Any]]) -> None:
    roles = cfn.resources(raw["workers"], "AWS::IAM::Role")
    (role,) = (r for logical_id, r in roles.items() if "InstanceRole" in logical_id)
    assert "AmazonSSMManagedInstanceCore" in cfn.referenced_ids(role["Properties"]["ManagedPolicyArns"])


def test_user_data_fits_amazon_linux_2023(raw: dict[str, dict[str, Any]]) -> None:
    script = user_data(raw)
    assert "ECS_ENABLE_GPU_SUPPORT=true" in script
    assert "dnf install -y -q awscli-2" in script
    assert "yum " not in script and "amazon-linux-extras" not in script
    assert "/var/lib/cloud/scripts/per-boot/" in script


def test_worker_service_starts_at_zero_warm_group_first_then_the_burst_group(
    platform: Any, templates: dict[str, Template], raw: dict[str, dict[str, Any]]
) -> None:
    templates["workers"].has_resource_properties("AWS::ECS::Service", {"DesiredCount": 0})
    service = next(
        r["Properties"] for r in raw["workers"]["Resources"].values() if r["Type"] == "AWS::ECS::Service"
    )
    warm, burst = service["CapacityProviderStrategy"]
    assert "Warm" in cfn.referenced_ids(warm["CapacityProvider"])
    assert (warm["Base"], warm["Weight"]) == (platform.config.warm_pool_size, 0)
    assert "Burst" in cfn.referenced_ids(burst["CapacityProvider"]) and burst["Weight"] == 1
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
    assert "Secrets" not in worker
    env = cfn.environment(worker)
    assert env["SYNAPSE_DEVICE"] == "gpu"  # no CUDA on a GPU instance: the worker refuses READY
    assert env["SYNAPSE_PUSHGATEWAY_URL"] == "http://manager.synapse.internal:9091"
    assert env["SYNAPSE_WORKER_ADVERTISE_HOST"] == "ecs-metadata"
    assert env["SYNAPSE_TRITON_BIND_HOST"] == "0.0.0.0"


def test_ecs_waits_out_the_worker_s_clean_shutdown_before_killing_it(raw: dict[str, dict[str, Any]]) -> None:
    from worker_image.agent import SHUTDOWN_BOUND_S

    stop_timeout = cfn.container(raw["workers"], "worker")["StopTimeout"]
    assert SHUTDOWN_BOUND_S < stop_timeout <= 120  # ECS's maximum, and inside a Spot notice


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
    assert "Secrets" not in manager
    env = cfn.environment(manager)
    assert env["SYNAPSE_WORKER_PROVIDER"] == "ecs"
    assert {"SYNAPSE_ECS_CLUSTER", "SYNAPSE_ECS_WORKER_SERVICE", "SYNAPSE_REDIS_URL"} <= env.keys()
    assert env["SYNAPSE_METRICS_PORT"] == "9100"


def test_lean_manager_is_a_small_graviton_task_with_a_public_address(raw: dict[str, dict[str, Any]]) -> None:
    task = cfn.only(raw["manager"], "AWS::ECS::TaskDefinition")
    assert task["RuntimePlatform"]["CpuArchitecture"] == "ARM64"
    assert (task["Cpu"], task["Memory"]) == ("256", "1024")
    service = cfn.only(raw["manager"], "AWS::ECS::Service")
    network = service["NetworkConfiguration"]["AwsvpcConfiguration"]
    assert network["AssignPublicIp"] == "ENABLED"
    assert "publicSubnet" in cfn.referenced_ids(network["Subnets"])


def test_the_manager_image_is_built_for_arm64(synth: Synth) -> None:
    manifest = json.loads((synth.outdir / f"{synth.platform.manager.artifact_id}.assets.json").read_text())
    images = manifest["dockerImages"].values()
    (manager,) = (a for a in images if a["source"].get("dockerFile") == MANAGER_DOCKERFILE)
    assert manager["source"]["platform"] == "linux/arm64"


def test_manager_may_change_only_the_worker_service_in_ecs(raw: dict[str, dict[str, Any]]) -> None:
    task_role = [
        statement
        for statement in cfn.policy_statements("manager", raw["manager"])
        if statement.policy.startswith("ManagerTaskDefinitionTaskRole")
        and any(action.startswith("ecs:") for action in statement.actions)
    ]
    assert len(task_role) == 1
    (statement,) = task_role
    assert sorted(statement.actions) == ["ecs:DescribeServices", "ecs:UpdateService"]
    assert len(statement.resources) == 1
    assert "WorkersService" in statement.resources[0]
    assert "*" not in statement.resources[0]


def test_jobs_at_zero_start_warm_then_burst_instances_without_waiting_for_managed_scaling(
    raw: dict[str, dict[str, Any]],
) -> None:
    """The manager raises the groups' desired capacity itself (manager/providers/ecs.py): it is told the
    groups in the order the service fills them, warm first, and may change no other group."""
    variables = cfn.environment(cfn.container(raw["manager"], "manager"))
    told = json.dumps(variables["SYNAPSE_ECS_WORKER_ASGS"])
    assert told.index("WarmGroup") < told.index("BurstGroup")
    scaling = [
        statement
        for statement in cfn.policy_statements("manager", raw["manager"])
        if statement.policy.startswith("ManagerTaskDefinitionTaskRole")
        and "autoscaling:SetDesiredCapacity" in statement.actions
    ]
    assert len(scaling) == 1
    (statement,) = scaling
    assert statement.actions == ("autoscaling:SetDesiredCapacity",)
    assert len(statement.resources) == 2
    assert sorted(
        "WarmGroup" if "WarmGroup" in json.dumps(r) else "BurstGroup" for r in statement.resources
    ) == [
        "BurstGroup",
        "WarmGroup",
    ]


def test_no_policy_grants_every_action_of_a_service(raw: dict[str, dict[str, Any]]) -> None:
    for stack, template in raw.items():
        for statement in cfn.policy_statements(stack, template):
            for action in statement.actions:
                assert action != "*" and not action.endswith(":*"), (stack, statement)


def health_check(definition: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The shell command of a container's health check, and the check itself."""
    check = definition["HealthCheck"]
    kind, command = check["Command"]
    assert kind == "CMD-SHELL"
    return command, check


def test_manager_health_check_asks_healthz_which_fails_when_the_autoscaler_stops(
    raw: dict[str, dict[str, Any]],
) -> None:
    command, check = health_check(cfn.container(raw["manager"], "manager"))
    assert f"http://127.0.0.1:{METRICS_PORT}{HEALTHZ_PATH}" in command
    assert (check["Interval"], check["Retries"]) == (30, 3)


class _Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/v2/health/ready" else 404)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def run_worker_check(code: str, port: int, state: Path) -> int:
    """The worker's health check, pointed at a Triton on `port` and an agent's state folder `state`."""
    local = code.replace(f"127.0.0.1:{TRITON_HTTP_PORT}", f"127.0.0.1:{port}")
    local = local.replace(AGENT_ALIVE_GLOB, str(state / "workers" / "*" / ALIVE_FILE))
    assert local != code
    return subprocess.run([sys.executable, "-c", local], timeout=20, check=False).returncode


def test_worker_health_check_fails_when_triton_hangs_or_the_agent_stops_beating(
    raw: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    command, check = health_check(cfn.container(raw["workers"], "worker"))
    prefix = 'python3 -c "'
    assert command.startswith(prefix) and command.endswith('"')
    code = command[len(prefix) : -1]
    assert check["Timeout"] > 3  # urlopen's own timeout fires first: a hung Triton fails, not times out
    # The agent writes <state_dir>/workers/<id>/alive; the image runs it in /opt/synapse, state `.synapse`.
    assert f"/opt/synapse/{Settings().state_dir}/workers/*/{ALIVE_FILE}" == AGENT_ALIVE_GLOB
    assert "WORKDIR /opt/synapse\n" in (REPO / "worker_image" / "Dockerfile").read_text()

    alive = tmp_path / "workers" / "worker-1" / ALIVE_FILE
    alive.parent.mkdir(parents=True)
    alive.touch()
    ready = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ready)
    threading.Thread(target=ready.serve_forever, daemon=True).start()
    hung = socket.create_server(("127.0.0.1", 0))  # accepts connections, never answers: a stopped Triton
    try:
        ready_port, hung_port = ready.server_address[1], hung.getsockname()[1]
        assert run_worker_check(code, ready_port, tmp_path) == 0
        assert run_worker_check(code, hung_port, tmp_path) != 0
        stale = time.time() - AGENT_ALIVE_MAX_AGE_S - 5
        os.utime(alive, (stale, stale))  # the agent stopped beating
        assert run_worker_check(code, ready_port, tmp_path) != 0
        alive.unlink()
        assert run_worker_check(code, ready_port, tmp_path) != 0
    finally:
        ready.shutdown()
        hung.close()
