"""The workload manager on Fargate: batches jobs from ElastiCache and scales the GPU worker service."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_servicediscovery as servicediscovery
from constructs import Construct

from stacks.config import METRICS_PORT, REPO_ROOT, SynapseConfig
from stacks.nag import suppress, suppress_image_pull_wildcard, task_security_group

MANAGER_DOCKERFILE = "docker/manager.Dockerfile"


class ManagerService(Construct):
    """One always-on manager task, registered in Cloud Map as `manager` so Prometheus can scrape it.

    Its task role starts empty: the right to scale workers is granted where the units meet (app.py).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ecs.ICluster,
        subnets: ec2.SubnetSelection,
        namespace: servicediscovery.INamespace,
        redis_url: str,
        redis_auth_secret: secretsmanager.ISecret,
        worker_cluster_name: str,
        worker_service_name: str,
        config: SynapseConfig,
    ) -> None:
        super().__init__(scope, construct_id)
        self.security_group = task_security_group(
            self, vpc=cluster.vpc, description="Synapse manager: /metrics from Prometheus only"
        )
        self.task_definition = ecs.FargateTaskDefinition(
            self,
            "TaskDefinition",
            cpu=1024,
            memory_limit_mib=2048,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=ecs.CpuArchitecture.X86_64,
                operating_system_family=ecs.OperatingSystemFamily.LINUX,
            ),
        )
        log_group = logs.LogGroup(
            self,
            "Logs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        self.task_definition.add_container(
            "manager",
            image=ecs.ContainerImage.from_asset(
                str(REPO_ROOT),
                file=MANAGER_DOCKERFILE,
                platform=ecr_assets.Platform.LINUX_AMD64,
                display_name="synapse-manager",
            ),
            command=["python", "-m", "manager"],
            port_mappings=[ecs.PortMapping(container_port=METRICS_PORT, name="metrics")],
            environment={
                "SYNAPSE_REDIS_URL": redis_url,
                "SYNAPSE_MODELS": config.models,
                "SYNAPSE_WORKER_PROVIDER": "ecs",
                "SYNAPSE_ECS_CLUSTER": worker_cluster_name,
                "SYNAPSE_ECS_WORKER_SERVICE": worker_service_name,
                "SYNAPSE_MIN_WORKERS": "0",
                "SYNAPSE_MAX_WORKERS": str(config.max_workers),
                "SYNAPSE_SCALE_TO_ZERO_AFTER": str(config.scale_to_zero_after_s),
                "SYNAPSE_METRICS_PORT": str(METRICS_PORT),
                "SYNAPSE_GPU_PRICE_PER_HOUR": str(config.gpu_price_per_hour),
                "SYNAPSE_LOG_LEVEL": "INFO",
            },
            secrets={"SYNAPSE_REDIS_AUTH_TOKEN": ecs.Secret.from_secrets_manager(redis_auth_secret)},
            logging=ecs.LogDrivers.aws_logs(stream_prefix="manager", log_group=log_group),
            # /healthz: 503 (urlopen raises) once the autoscaler loop stopped going round.
            health_check=ecs.HealthCheck(
                command=[
                    "CMD-SHELL",
                    'python -c "import urllib.request; urllib.request.urlopen('
                    f"'http://127.0.0.1:{METRICS_PORT}/healthz', timeout=3)\"",
                ],
                interval=cdk.Duration.seconds(30),
                timeout=cdk.Duration.seconds(5),
                retries=3,
                start_period=cdk.Duration.seconds(30),
            ),
        )
        self.service = ecs.FargateService(
            self,
            "Service",
            cluster=cluster,
            task_definition=self.task_definition,
            desired_count=1,
            min_healthy_percent=100,
            max_healthy_percent=200,
            circuit_breaker=ecs.DeploymentCircuitBreaker(rollback=True),
            security_groups=[self.security_group],
            vpc_subnets=subnets,
            assign_public_ip=False,
            cloud_map_options=ecs.CloudMapOptions(
                name="manager",
                cloud_map_namespace=namespace,
                dns_record_type=servicediscovery.DnsRecordType.A,
                dns_ttl=cdk.Duration.seconds(10),
            ),
        )
        self.connections = self.service.connections
        self.task_role = self.task_definition.task_role
        suppress_image_pull_wildcard(self.task_definition.obtain_execution_role())
        suppress(
            self.task_definition,
            "ECS2",
            "Only non-secret settings (the SYNAPSE_* contract) are plain environment variables; the "
            "ElastiCache AUTH token comes from Secrets Manager through the task's `secrets`.",
        )


class ManagerStack(cdk.Stack):
    """The workload manager service."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        env: cdk.Environment,
        config: SynapseConfig,
        cluster: ecs.ICluster,
        subnets: ec2.SubnetSelection,
        namespace: servicediscovery.INamespace,
        redis_url: str,
        redis_auth_secret: secretsmanager.ISecret,
        worker_service_name: str,
    ) -> None:
        super().__init__(scope, construct_id, env=env, description="Synapse: workload manager (Fargate)")
        self.manager = ManagerService(
            self,
            "Manager",
            cluster=cluster,
            subnets=subnets,
            namespace=namespace,
            redis_url=redis_url,
            redis_auth_secret=redis_auth_secret,
            worker_cluster_name=cluster.cluster_name,
            worker_service_name=worker_service_name,
            config=config,
        )
