"""GPU workers: an ECS cluster, GPU capacity with a warm pool of stopped instances, and the Triton service.

Scale-out path: the manager raises the worker service's desired count; the capacity provider asks
the Auto Scaling group for an instance; the group starts a stopped one from the warm pool, whose
disk already holds the worker image, so the task skips both the instance's first boot and the pull.

Two groups, since a warm pool cannot be added to a group with a mixed instances policy or Spot
(https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_PutWarmPool.html): the warm group (the
first instance type, on demand) serves the first `warmPoolSize` workers, and the burst group (every
instance type of `synapse:instanceTypes`, Spot with `synapse:spot`) the rest, each across every zone
of the VPC.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import custom_resources as cr
from constructs import Construct

from contract.launch_volume import (
    LAUNCH_IOPS,
    LAUNCH_THROUGHPUT_MIB_S,
    VOLUME_INITIALIZATION_RATE_MIB_S,
)
from stacks.config import (
    PUSHGATEWAY_PORT,
    SERVICE_NAMESPACE,
    TRITON_GRPC_PORT,
    TRITON_HTTP_PORT,
    TRITON_METRICS_PORT,
    WORKER_UID,
    SynapseConfig,
)
from stacks.gpu_peak import REFRESH_MAX_HEALTHY_PERCENT, REFRESH_MIN_HEALTHY_PERCENT
from stacks.nag import (
    nag_resource,
    suppress,
    suppress_custom_resource,
    suppress_image_pull_wildcard,
    task_security_group,
)
from stacks.worker_build.construct import WorkerImage

PREWARM_HOOK = "synapse-prewarm"
# Where worker_image/Dockerfile puts triton_models/.
WORKER_MODEL_REPOSITORY = "/opt/synapse/triton_models"
ASG_TAG = "synapse:unit"
ASG_TAG_VALUE = "gpu-workers"
HOST_MODEL_CACHE = "/var/lib/synapse/model-cache"
CONTAINER_MODEL_CACHE = "/var/cache/synapse/models"
PREWARM_SCRIPT = Path(__file__).with_name("prewarm.sh")
PREWARM_PATH = "/var/lib/cloud/scripts/per-boot/synapse-prewarm.sh"
ROOT_DEVICE = "/dev/xvda"
# How long Auto Scaling and the capacity provider wait before counting a new instance's metrics: an
# ECS instance is useful once its agent registers (well under a minute), and the default 300 s kept
# the capacity provider from scaling in, so GPUs stayed billed long after their last task.
INSTANCE_WARMUP = cdk.Duration.seconds(60)
# What prewarm.sh may take, step by step (it reads these from /etc/synapse/prewarm.env): waiting for the
# instance's target lifecycle state, installing the AWS CLI, pulling the worker image (about 11 GB from
# ECR, extracted onto the launch volume: about 3 minutes by `synapse plan cold-start`, so more than doubled,
# as a slower pull than estimated must not stop an instance unpulled). The launch hook's heartbeat is their
# sum plus a minute (the hook's release, three tries, fits in it), so a failing script holds an instance a
# bounded time, not the 30 minutes it used to.
PREWARM_STATE_WAIT_S = 120
PREWARM_CLI_INSTALL_S = 120
PREWARM_PULL_TIMEOUT_S = 480
PREWARM_HEARTBEAT = cdk.Duration.seconds(
    PREWARM_STATE_WAIT_S + PREWARM_CLI_INSTALL_S + PREWARM_PULL_TIMEOUT_S + 60
)
# How long ECS waits after SIGTERM before killing the worker container: past the agent's clean shutdown
# (worker_image/agent.SHUTDOWN_BOUND_S, 33 s: deregister, delete its metrics, let Triton unload), which
# ECS's default of 30 s cut short. At most 120 s, and within a Spot instance's two-minute notice:
# https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ContainerDefinition.html (stopTimeout).
WORKER_STOP_TIMEOUT = cdk.Duration.seconds(60)
# Where a worker pushes its metrics: the Pushgateway beside the manager (stacks/collector.py).
WORKER_PUSHGATEWAY_URL = f"http://manager.{SERVICE_NAMESPACE}:{PUSHGATEWAY_PORT}"

TRITON_PORTS = ec2.Port.tcp_range(TRITON_HTTP_PORT, TRITON_METRICS_PORT)
# The agent touches <state dir>/workers/<id>/alive every heartbeat (worker_image/agent.py, ALIVE_FILE);
# in the image the state dir is /opt/synapse/.synapse (its WORKDIR and the default `.synapse`).
AGENT_ALIVE_GLOB = "/opt/synapse/.synapse/workers/*/alive"
AGENT_ALIVE_MAX_AGE_S = 30
# Healthy = Triton answers ready within 3 s (a hung or stopped one does not) AND the agent's heartbeat
# is fresh (a wedged agent no longer renews the worker's registration). ECS replaces a task that fails.
WORKER_HEALTH_CHECK = (
    "import glob, os, sys, time, urllib.request; "
    f"urllib.request.urlopen('http://127.0.0.1:{TRITON_HTTP_PORT}/v2/health/ready', timeout=3); "
    f"sys.exit(not any(time.time() - os.path.getmtime(p) < {AGENT_ALIVE_MAX_AGE_S} "
    f"for p in glob.glob('{AGENT_ALIVE_GLOB}')))"
)


def launch_volume(size_gb: int) -> ec2.BlockDeviceVolume:
    """A new GPU instance's root volume: encrypted gp3, deleted with its instance, provisioned for the
    cold path (contract/launch_volume.py). Its size holds the AMI, the extracted worker image and the
    model cache (config.py: workerDiskGb), and bills while a warm instance is stopped."""
    return ec2.BlockDeviceVolume.ebs(
        size_gb,
        encrypted=True,
        volume_type=ec2.EbsDeviceVolumeType.GP3,
        delete_on_termination=True,
        throughput=LAUNCH_THROUGHPUT_MIB_S,
        iops=LAUNCH_IOPS,
        volume_initialization_rate=cdk.Size.mebibytes(VOLUME_INITIALIZATION_RATE_MIB_S),
    )


class Cluster(Construct):
    """The ECS cluster every Synapse service runs on (Fargate for the CPU parts, EC2 for the GPUs)."""

    def __init__(
        self, scope: Construct, construct_id: str, *, vpc: ec2.IVpc, container_insights: bool
    ) -> None:
        super().__init__(scope, construct_id)
        # Container Insights bills per metric and no alarm needs it (stacks/alarms.py reads the
        # capacity provider's and the service's own metrics): the lean profile leaves it off.
        self.cluster = ecs.Cluster(
            self,
            "Cluster",
            vpc=vpc,
            container_insights_v2=(
                ecs.ContainerInsights.ENABLED if container_insights else ecs.ContainerInsights.DISABLED
            ),
            enable_fargate_capacity_providers=True,
        )
        if not container_insights:
            suppress(
                self.cluster,
                "ECS4",
                "Lean profile: Container Insights bills per metric, and no alarm or dashboard reads "
                "it (alarms use ECS managed scaling's and the service's own metrics; dashboards read "
                "Prometheus). The production profile turns it on.",
            )


@dataclass(frozen=True)
class GpuPool:
    """One Auto Scaling group of GPU instances and the ECS capacity provider over it."""

    name: str
    group: autoscaling.AutoScalingGroup
    capacity_provider: ecs.AsgCapacityProvider
    launch_template: ec2.LaunchTemplate


class GpuCapacity(Construct):
    """ECS GPU instances (min 0) in up to two groups, each a capacity provider: `warm`, the first instance
    type on demand with a warm pool; `burst`, a mixed instances policy over every type, Spot if asked,
    with capacity rebalancing.

    Warm-pool instances boot once, pull the worker image (`prewarm.sh`, a lifecycle hook holds the
    instance until the pull is done) and are then stopped, and the manager lowers their volumes to gp3's
    baseline; a stopped instance costs only its disk. Each group has a launch template of its own, alike
    but for what the warm pool needs; both launch a root volume provisioned for a new instance's cold
    path. Every deploy that changes a group's launch template refreshes its instances, the warm ones
    included, so none keeps an old AMI or image.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ecs.Cluster,
        subnets: ec2.SubnetSelection,
        public_ip: bool,
        instance_types: tuple[str, ...],
        warm_pool_size: int,
        burst_instances: int,
        spot: bool,
        disk_gb: int,
        image: WorkerImage,
        alerts: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        self._subnets, self._alerts, self._cluster = subnets, alerts, cluster
        self.security_group = ec2.SecurityGroup(
            self,
            "InstanceSecurityGroup",
            vpc=cluster.vpc,
            description="Synapse GPU instances: no ingress (tasks have their own ENIs and groups)",
            allow_all_outbound=True,
        )
        self.role = iam.Role(
            self,
            "InstanceRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="Synapse GPU instances: ECS agent, image pre-pull, warm-pool hook, SSM sessions",
            # Session Manager instead of SSH: no key pair and no open port to debug a GPU instance.
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore")],
        )
        image.repository.grant_pull(self.role)
        # prewarm.sh finds its group by instance id, then releases the hook; describe calls have no
        # resource-level permissions, and the completion is pinned to groups carrying our tag.
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["autoscaling:DescribeAutoScalingInstances"], resources=["*"])
        )
        any_group = stack.format_arn(
            service="autoscaling",
            resource="autoScalingGroup",
            resource_name="*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["autoscaling:CompleteLifecycleAction"],
                resources=[any_group],
                conditions={"StringEquals": {f"autoscaling:ResourceTag/{ASG_TAG}": ASG_TAG_VALUE}},
            )
        )

        # Amazon Linux 2023: a supported OS whose NVIDIA driver runs the worker's CUDA build.
        self._machine_image = ecs.EcsOptimizedImage.amazon_linux2023(ecs.AmiHardwareType.GPU)
        self._instance_type = ec2.InstanceType(instance_types[0])
        self._public_ip, self._image_uri, self._disk_gb = public_ip, image.image_uri, disk_gb
        self._warm_size = 0
        self.pools: list[GpuPool] = []
        if warm_pool_size > 0:
            self.pools.append(self._warm_pool(warm_pool_size))
        if burst_instances > 0:
            self.pools.append(self._burst_pool(instance_types, burst_instances, spot=spot))
        # A warm-pool instance pulls the image as it is prepared, during the deploy: only once it is built.
        for pool in self.pools:
            pool.group.node.add_dependency(image.build)
        self.instance_refreshes = [self._refresh_on_deploy(pool) for pool in self.pools]

        for pool in self.pools:
            suppress(
                pool.group,
                "AS3",
                "Launch and termination failures (no GPU quota, no capacity in the zone) go to the alerts "
                "topic (the group's notifications). Successful launches and terminations are the pool "
                "scaling between zero and a few instances many times a day by design: mail per event "
                "would be noise.",
            )
        suppress(
            self.role,
            "IAM4",
            "AmazonSSMManagedInstanceCore is the AWS-maintained minimum for Session Manager access "
            "(debugging a GPU instance without SSH keys or open ports).",
            applies_to=["Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore"],
        )
        suppress(
            self.role,
            "IAM5",
            "Wildcards CDK's ECS integration and ECR need: ecr:GetAuthorizationToken and the ECS "
            "agent's DiscoverPollEndpoint/log calls have no resource-level permissions, ecs:Submit* "
            "is the agent's state-change family on this cluster only, and the lifecycle-hook "
            "completion is limited to groups tagged synapse:unit=gpu-workers.",
            applies_to=[
                "Resource::*",
                "Action::ecs:Submit*",
                f"Resource::{any_group}",
            ],
        )

    @property
    def group_names(self) -> str:
        """The groups' names, comma-separated, in the order the worker service fills them (the warm group's
        base first, then the burst group): the order the manager starts instances in when jobs wait
        (manager/providers/ecs.py, SYNAPSE_ECS_WORKER_ASGS)."""
        return cdk.Fn.join(",", [pool.group.auto_scaling_group_name for pool in self.pools])

    def grant_start_instances(self, role: iam.IRole) -> None:
        """Lets `role` raise the groups' desired capacity, theirs only. DescribeAutoScalingGroups, which
        reads their sizes first, takes no resource
        (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2autoscaling.html)."""
        group_arns = [pool.group.auto_scaling_group_arn for pool in self.pools]
        iam.Grant.add_to_principal(
            grantee=role, actions=["autoscaling:SetDesiredCapacity"], resource_arns=group_arns
        )
        iam.Grant.add_to_principal(
            grantee=role, actions=["autoscaling:DescribeAutoScalingGroups"], resource_arns=["*"]
        )
        stack = cdk.Stack.of(self)
        suppress(
            role,
            "IAM5",
            "autoscaling:DescribeAutoScalingGroups has no resource-level permissions; SetDesiredCapacity is "
            "on the workers' groups alone, whose ARNs have a wildcard only where Auto Scaling puts a group's "
            "id.",
            applies_to=["Resource::*", *(nag_resource(stack, arn) for arn in group_arns)],
        )

    def grant_lower_stopped_volumes(self, role: iam.IRole) -> None:
        """Lets `role` find the groups' stopped instances and their volumes (Describe calls take no
        resource) and lower volumes with the workers' tag, no others (manager/providers/warm_volumes.py)."""
        stack = cdk.Stack.of(self)
        iam.Grant.add_to_principal(
            grantee=role, actions=["ec2:DescribeInstances", "ec2:DescribeVolumes"], resource_arns=["*"]
        )
        any_volume = stack.format_arn(service="ec2", resource="volume", resource_name="*")
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["ec2:ModifyVolume"],
                resources=[any_volume],
                conditions={"StringEquals": {f"aws:ResourceTag/{ASG_TAG}": ASG_TAG_VALUE}},
            )
        )
        suppress(
            role,
            "IAM5",
            "ec2:DescribeInstances and ec2:DescribeVolumes have no resource-level permissions; "
            "ec2:ModifyVolume is limited by condition to volumes tagged synapse:unit=gpu-workers, which only "
            "the GPU launch templates create.",
            applies_to=["Resource::*", nag_resource(stack, any_volume)],
        )

    @property
    def strategy(self) -> list[ecs.CapacityProviderStrategy]:
        """The worker service's placement: the first `warmPoolSize` tasks on the warm group (its base), every
        further one on the burst group."""
        strategy = []
        for pool in self.pools:
            warm = pool.name == "Warm"
            strategy.append(
                ecs.CapacityProviderStrategy(
                    capacity_provider=pool.capacity_provider.capacity_provider_name,
                    base=self._warm_size if warm else None,
                    weight=0 if warm and len(self.pools) > 1 else 1,
                )
            )
        return strategy

    def _launch_template(self, name: str, *, warm_pool: bool) -> ec2.LaunchTemplate:
        """A launch template for GPU instances, the same for both groups but for what the warm pool needs
        (`warm_pool`: prewarm.sh's hook, the agent's warm-pool check). Each has user data of its own: a
        capacity provider appends its cluster's lines to its group's template.

        Both launch the same root volume, provisioned for a new instance's cold path: why each figure, its
        AWS limits and its price are in contract/launch_volume.py, and manager/providers/warm_volumes.py
        lowers it on an instance stopped into the warm pool.
        """
        user_data = ec2.UserData.for_linux()
        region = cdk.Stack.of(self).region
        user_data.add_commands(
            *self._user_data(region=region, image_uri=self._image_uri, warm_pool=warm_pool)
        )
        # Last, after CDK's ECS lines: releasing the hook lets Auto Scaling stop the instance at once.
        # (cloud-init ran the then-empty per-boot folder before this user data, hence the explicit run.)
        user_data.add_on_exit_commands(PREWARM_PATH)
        template = ec2.LaunchTemplate(
            self,
            name,
            machine_image=self._machine_image,
            instance_type=self._instance_type,
            role=self.role,
            security_group=self.security_group,
            # Lean: a public address to reach ECR, ECS and the package mirrors without a NAT gateway.
            associate_public_ip_address=self._public_ip,
            user_data=user_data,
            require_imdsv2=True,
            detailed_monitoring=True,
            block_devices=[ec2.BlockDevice(device_name=ROOT_DEVICE, volume=launch_volume(self._disk_gb))],
        )
        # On the instance and its volume too (the template's tag specifications): the manager may lower
        # only a volume with this tag (grant_lower_stopped_volumes).
        cdk.Tags.of(template).add(ASG_TAG, ASG_TAG_VALUE)
        return template

    def _group(
        self, name: str, *, max_instances: int, **options: object
    ) -> tuple[autoscaling.AutoScalingGroup, ecs.AsgCapacityProvider]:
        """A group (min 0) in every zone of the VPC's workload subnets, launch errors to the alerts topic,
        and a managed-scaling capacity provider over it."""
        group = autoscaling.AutoScalingGroup(
            self,
            f"{name}Group",
            vpc=self._cluster.vpc,
            vpc_subnets=self._subnets,
            min_capacity=0,
            max_capacity=max_instances,
            cooldown=cdk.Duration.seconds(60),
            default_instance_warmup=INSTANCE_WARMUP,
            # A launch that fails (no GPU quota, no capacity in the zone) reaches a person.
            notifications=[
                autoscaling.NotificationConfiguration(
                    topic=self._alerts, scaling_events=autoscaling.ScalingEvents.ERRORS
                )
            ],
            **options,  # type: ignore[arg-type]
        )
        cdk.Tags.of(group).add(ASG_TAG, ASG_TAG_VALUE)
        provider = ecs.AsgCapacityProvider(
            self,
            f"{name}CapacityProvider",
            auto_scaling_group=group,
            # The enum has no AL2023 member; this one writes ECS_CLUSTER to /etc/ecs/ecs.config, which
            # the AL2023 agent reads the same way.
            machine_image_type=ecs.MachineImageType.AMAZON_LINUX_2,
            enable_managed_scaling=True,
            enable_managed_termination_protection=True,
            target_capacity_percent=100,
            instance_warmup_period=int(INSTANCE_WARMUP.to_seconds()),
        )
        self._cluster.add_asg_capacity_provider(provider)
        return group, provider

    def _warm_pool(self, size: int) -> GpuPool:
        self._warm_size = size
        template = self._launch_template("LaunchTemplate", warm_pool=True)
        group, provider = self._group("Warm", max_instances=size, launch_template=template)
        # Only this group holds its new instances, so that prewarm.sh pulls the image before one stops into
        # the pool; its template tells prewarm.sh the hook's name (`warm_pool=True`).
        hook = group.add_lifecycle_hook(
            "Prewarm",
            lifecycle_hook_name=PREWARM_HOOK,
            lifecycle_transition=autoscaling.LifecycleTransition.INSTANCE_LAUNCHING,
            # prewarm.sh's own limits, summed: a script that dies holds the instance no longer than this,
            # then the instance goes on anyway.
            heartbeat_timeout=PREWARM_HEARTBEAT,
            default_result=autoscaling.DefaultResult.CONTINUE,
        )
        # Constant size: `size` stopped instances whatever the group's desired count. Scaled-in instances
        # are terminated, not returned: ECS capacity providers do not support reuse on scale-in, and a
        # refill boots a fresh instance that pre-pulls the current image.
        warm_pool = group.add_warm_pool(
            min_size=size,
            max_group_prepared_capacity=size,
            pool_state=autoscaling.PoolState.STOPPED,
            reuse_on_scale_in=False,
        )
        # The hook first: an instance that entered the pool before it existed would stop unpulled.
        warm_pool.node.add_dependency(hook)
        return GpuPool("Warm", group, provider, template)

    def _burst_pool(self, instance_types: tuple[str, ...], size: int, *, spot: bool) -> GpuPool:
        template = self._launch_template("BurstLaunchTemplate", warm_pool=False)
        policy = autoscaling.MixedInstancesPolicy(
            launch_template=template,
            # Any of the types, in the order given where on demand (the first is the warm pool's).
            launch_template_overrides=[
                autoscaling.LaunchTemplateOverrides(instance_type=ec2.InstanceType(t)) for t in instance_types
            ],
            instances_distribution=autoscaling.InstancesDistribution(
                on_demand_allocation_strategy=autoscaling.OnDemandAllocationStrategy.PRIORITIZED,
                on_demand_base_capacity=0,
                on_demand_percentage_above_base_capacity=0 if spot else 100,
                # The pools least likely to be interrupted, then the cheapest of them (AWS's recommended
                # strategy: https://docs.aws.amazon.com/autoscaling/ec2/userguide/allocation-strategies.html).
                spot_allocation_strategy=autoscaling.SpotAllocationStrategy.PRICE_CAPACITY_OPTIMIZED,
            ),
        )
        # Capacity rebalancing launches a replacement when EC2 says a Spot instance is at elevated risk,
        # before its two-minute notice (https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-capacity-rebalancing.html).
        # No launch hook: a burst instance never enters a warm pool, so there is nothing to pull before it
        # is in service and no hook to release.
        group, provider = self._group(
            "Burst", max_instances=size, mixed_instances_policy=policy, capacity_rebalance=spot
        )
        return GpuPool("Burst", group, provider, template)

    def _refresh_on_deploy(self, pool: GpuPool) -> cr.AwsCustomResource:
        """StartInstanceRefresh whenever the pool's template gets a new version (AMI, user data, image).

        SkipMatching leaves instances already on the new version alone, so a deploy that changes
        nothing replaces nothing; warm-pool instances are refreshed too. Instances protected from
        scale-in (ECS protects those running a worker) are replaced as well, new before old, so a
        serving worker keeps serving until its successor is in service.
        """
        stack = cdk.Stack.of(self)
        group = pool.group
        group_name = group.auto_scaling_group_name
        call = cr.AwsSdkCall(
            service="AutoScaling",
            action="startInstanceRefresh",
            parameters={
                "AutoScalingGroupName": group_name,
                "Strategy": "Rolling",
                "Preferences": {
                    "SkipMatching": True,
                    "ScaleInProtectedInstances": "Refresh",
                    "StandbyInstances": "Terminate",
                    "MinHealthyPercentage": REFRESH_MIN_HEALTHY_PERCENT,
                    "MaxHealthyPercentage": REFRESH_MAX_HEALTHY_PERCENT,
                    "InstanceWarmup": int(INSTANCE_WARMUP.to_seconds()),
                },
            },
            # The version in the physical id makes CloudFormation call again when it changes.
            physical_resource_id=cr.PhysicalResourceId.of(
                f"{group_name}@{pool.launch_template.latest_version_number}"
            ),
            # A refresh still running from the previous deploy goes on with the newest version.
            ignore_error_codes_matching="InstanceRefreshInProgress",
        )
        group_arn = stack.format_arn(
            service="autoscaling",
            resource="autoScalingGroup",
            resource_name=f"*:autoScalingGroupName/{group_name}",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        refresh = cr.AwsCustomResource(
            self,
            f"{group.node.id}InstanceRefresh",
            on_update=call,
            policy=cr.AwsCustomResourcePolicy.from_statements(
                [iam.PolicyStatement(actions=["autoscaling:StartInstanceRefresh"], resources=[group_arn])]
            ),
            install_latest_aws_sdk=False,
        )
        refresh.node.add_dependency(group)
        suppress(
            refresh,
            "IAM5",
            "StartInstanceRefresh on this one group, named in its ARN; the `*` is the group's id, "
            "which Auto Scaling generates and CloudFormation cannot reference.",
            applies_to=[nag_resource(stack, group_arn)],
        )
        suppress_custom_resource(stack)
        return refresh

    @staticmethod
    def _user_data(*, region: str, image_uri: str, warm_pool: bool) -> list[str]:
        """ECS agent settings, the host's model cache, and the per-boot pre-pull script (which does nothing
        on an instance of a group without a warm pool: `HOOK` empty)."""
        script = PREWARM_SCRIPT.read_text()
        # The agent waits for InService before registering, so an instance headed for the pool never gets a
        # task. Only where there is a pool: the agent asks IMDS for the target state, and one that finds none
        # yet sleeps a whole minute before it asks again (amazon-ecs-agent, agent/app/agent.go); on the warm
        # group prewarm.sh has waited for the state before the agent starts, on the burst group nothing does.
        warm_pools_check = ["ECS_WARM_POOLS_CHECK=true"] if warm_pool else []
        return [
            "cat >> /etc/ecs/ecs.config <<'EOF'",
            "ECS_ENABLE_GPU_SUPPORT=true",
            *warm_pools_check,
            # Use the image prewarm.sh already pulled instead of asking ECR again.
            "ECS_IMAGE_PULL_BEHAVIOR=prefer-cached",
            # Tasks must not borrow the instance role through the metadata service.
            "ECS_AWSVPC_BLOCK_IMDS=true",
            # On a Spot instance's two-minute interruption notice the agent drains it: its worker task is
            # stopped (SIGTERM, then the stop timeout) and replaced elsewhere. No effect on demand.
            "ECS_ENABLE_SPOT_INSTANCE_DRAINING=true",
            "EOF",
            f"install -d -o {WORKER_UID} -g {WORKER_UID} -m 0750 {HOST_MODEL_CACHE}",
            "install -d -m 0755 /etc/synapse /var/lib/cloud/scripts/per-boot",
            "cat > /etc/synapse/prewarm.env <<EOF",
            f"REGION={region}",
            f"IMAGE={image_uri}",
            f"HOOK={PREWARM_HOOK if warm_pool else ''}",
            f"STATE_WAIT_S={PREWARM_STATE_WAIT_S}",
            f"CLI_INSTALL_S={PREWARM_CLI_INSTALL_S}",
            f"PULL_TIMEOUT_S={PREWARM_PULL_TIMEOUT_S}",
            "EOF",
            f"cat > {PREWARM_PATH} <<'EOF'",
            script.rstrip("\n"),
            "EOF",
            f"chmod 0755 {PREWARM_PATH}",
        ]


class WorkerService(Construct):
    """The Triton worker: one task per GPU, started at desired count 0; the manager scales it.

    Its tasks' network interfaces (awsvpc) have no public address in either profile: a worker only
    talks to ElastiCache, the manager's Pushgateway and S3 (through the VPC's gateway endpoint); the
    image pull and the logs go through the instance's own network.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ecs.ICluster,
        capacity_strategy: list[ecs.CapacityProviderStrategy],
        subnets: ec2.SubnetSelection,
        image: WorkerImage,
        redis_environment: dict[str, str],
        model_bucket_name: str,
        model_cache_bytes: int,
        models: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.security_group = task_security_group(
            self, vpc=cluster.vpc, description="Synapse Triton workers: Triton ports from the manager only"
        )
        self.task_definition = ecs.Ec2TaskDefinition(
            self,
            "TaskDefinition",
            network_mode=ecs.NetworkMode.AWS_VPC,
            volumes=[ecs.Volume(name="model-cache", host=ecs.Host(source_path=HOST_MODEL_CACHE))],
        )
        self.task_definition.node.add_dependency(image.build)  # no task names an image not yet pushed
        log_group = logs.LogGroup(
            self,
            "Logs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        container = self.task_definition.add_container(
            "worker",
            image=image.container_image(),
            command=["python3", "-m", "worker_image"],
            gpu_count=1,
            memory_reservation_mib=4096,
            stop_timeout=WORKER_STOP_TIMEOUT,
            # Triton's Python backend moves tensors through shared memory; Docker's 64 MiB is too small.
            linux_parameters=ecs.LinuxParameters(self, "LinuxParameters", shared_memory_size=1024),
            port_mappings=[
                ecs.PortMapping(container_port=port, name=name)
                for name, port in (
                    ("triton-http", TRITON_HTTP_PORT),
                    ("triton-grpc", TRITON_GRPC_PORT),
                    ("triton-metrics", TRITON_METRICS_PORT),
                )
            ],
            environment={
                **redis_environment,
                # A GPU instance without CUDA is a broken worker, never a slow CPU one.
                "SYNAPSE_DEVICE": "gpu",
                # Triton listens on the task's ENI; the agent registers the task's IP from ECS metadata.
                "SYNAPSE_TRITON_BIND_HOST": "0.0.0.0",
                "SYNAPSE_WORKER_ADVERTISE_HOST": "ecs-metadata",
                "SYNAPSE_MODELS": models,
                "SYNAPSE_MODEL_REPOSITORY": WORKER_MODEL_REPOSITORY,
                "SYNAPSE_MODEL_BUCKET": model_bucket_name,
                "SYNAPSE_MODEL_CACHE_DIR": CONTAINER_MODEL_CACHE,
                "SYNAPSE_MODEL_CACHE_BYTES": str(model_cache_bytes),
                "SYNAPSE_PUSHGATEWAY_URL": WORKER_PUSHGATEWAY_URL,
                "SYNAPSE_TRITON_HTTP_PORT": str(TRITON_HTTP_PORT),
                "SYNAPSE_TRITON_GRPC_PORT": str(TRITON_GRPC_PORT),
                "SYNAPSE_TRITON_METRICS_PORT": str(TRITON_METRICS_PORT),
                "SYNAPSE_LOG_LEVEL": "INFO",
            },
            logging=ecs.LogDrivers.aws_logs(stream_prefix="worker", log_group=log_group),
            health_check=ecs.HealthCheck(
                command=["CMD-SHELL", f'python3 -c "{WORKER_HEALTH_CHECK}"'],
                interval=cdk.Duration.seconds(15),
                timeout=cdk.Duration.seconds(5),
                retries=3,
                # Models load (and sync from S3) before Triton says ready.
                start_period=cdk.Duration.seconds(300),
            ),
        )
        container.add_mount_points(
            ecs.MountPoint(container_path=CONTAINER_MODEL_CACHE, source_volume="model-cache", read_only=False)
        )
        self.service = ecs.Ec2Service(
            self,
            "Service",
            cluster=cluster,
            task_definition=self.task_definition,
            desired_count=0,
            capacity_provider_strategies=capacity_strategy,
            security_groups=[self.security_group],
            vpc_subnets=subnets,
            # A deploy replaces workers in place rather than needing spare GPUs (the group may be at
            # its maximum); the manager re-dispatches the batches of a worker that goes away.
            min_healthy_percent=0,
            max_healthy_percent=100,
            circuit_breaker=ecs.DeploymentCircuitBreaker(rollback=True),
        )
        # Its strategy names the capacity provider, which must be attached to the cluster first: the
        # attachment is a separate resource under the cluster, so depend on the cluster's subtree.
        self.service.node.add_dependency(cluster)
        self.connections = self.service.connections
        suppress_image_pull_wildcard(self.task_definition.obtain_execution_role())
        suppress(
            self.task_definition,
            "ECS2",
            "The environment holds only non-secret settings (the SYNAPSE_* contract): ElastiCache is "
            "reached with IAM tokens the task role signs, so there is no secret to inject.",
        )

    def grant_scale(self, grantee: iam.IGrantable) -> iam.Grant:
        """Lets `grantee` read and change this service (its desired count), and nothing else."""
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["ecs:DescribeServices", "ecs:UpdateService"],
            resource_arns=[self.service.service_arn],
        )


class WorkersStack(cdk.Stack):
    """The cluster, GPU capacity with its warm pool, and the Triton worker service."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        env: cdk.Environment,
        config: SynapseConfig,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        public_ip: bool,
        redis_environment: dict[str, str],
        model_bucket_name: str,
        alerts: sns.ITopic,
    ) -> None:
        super().__init__(
            scope, construct_id, env=env, description="Synapse: ECS cluster, GPU warm pool, workers"
        )
        image = WorkerImage(self, "WorkerImage")
        self.cluster = Cluster(
            self, "Cluster", vpc=vpc, container_insights=config.defaults.container_insights
        ).cluster
        self.capacity = GpuCapacity(
            self,
            "GpuCapacity",
            cluster=self.cluster,
            subnets=subnets,
            public_ip=public_ip,
            instance_types=config.instance_types,
            warm_pool_size=config.warm_pool_size,
            burst_instances=config.burst_workers,
            spot=config.spot,
            disk_gb=config.worker_disk_gb,
            image=image,
            alerts=alerts,
        )
        self.workers = WorkerService(
            self,
            "Workers",
            cluster=self.cluster,
            capacity_strategy=self.capacity.strategy,
            subnets=subnets,
            image=image,
            redis_environment=redis_environment,
            model_bucket_name=model_bucket_name,
            model_cache_bytes=config.worker_model_cache_bytes,
            models=config.models,
        )
