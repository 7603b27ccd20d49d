"""The workload manager on Fargate (Graviton): batches jobs from ElastiCache and scales the GPU workers.

The task also carries the metrics sidecars (stacks/collector.py): a Pushgateway the workers push to
and a Prometheus agent that scrapes it and the manager and remote-writes to Amazon Managed Prometheus.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_servicediscovery as servicediscovery
from constructs import Construct

from stacks import idle_cost
from stacks.collector import MetricsSidecars
from stacks.config import METRICS_PORT, REPO_ROOT, SynapseConfig
from stacks.nag import suppress, suppress_image_pull_wildcard, task_security_group
from stacks.notifications import OutcomeTopics, WebhookSecrets

MANAGER_DOCKERFILE = "docker/manager.Dockerfile"


class ManagerService(Construct):
    """One always-on manager task, registered in Cloud Map as `manager`: workers push their metrics to
    the Pushgateway beside it at `manager.synapse.internal`.

    Its task role starts empty: the rights to scale workers, to sign in to ElastiCache, to write
    metrics, to read the webhook secrets, to publish outcomes and to use the files bucket are granted where
    the units meet (app.py). `notification_environment` names those secrets and topics
    (stacks/notifications.py); `file_environment` the bucket its batch runner reads inputs from and writes
    output files to.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ecs.ICluster,
        subnets: ec2.SubnetSelection,
        public_ip: bool,
        namespace: servicediscovery.INamespace,
        redis_environment: dict[str, str],
        notification_environment: dict[str, str],
        file_environment: dict[str, str],
        worker_cluster_name: str,
        worker_service_name: str,
        worker_group_names: str,
        config: SynapseConfig,
    ) -> None:
        super().__init__(scope, construct_id)
        self.security_group = task_security_group(
            self, vpc=cluster.vpc, description="Synapse manager: Pushgateway from the workers only"
        )
        # Graviton: about 20 % less per vCPU-hour than x86, and every dependency has aarch64 wheels.
        self.task_definition = ecs.FargateTaskDefinition(
            self,
            "TaskDefinition",
            cpu=config.defaults.manager_cpu,
            memory_limit_mib=config.defaults.manager_memory_mib,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=ecs.CpuArchitecture.ARM64,
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
                platform=ecr_assets.Platform.LINUX_ARM64,
                display_name="synapse-manager",
            ),
            command=["python", "-m", "manager"],
            port_mappings=[ecs.PortMapping(container_port=METRICS_PORT, name="metrics")],
            environment={
                **redis_environment,
                **notification_environment,
                **file_environment,
                # AWS: a callback goes to the internet, so only over TLS (the front door refuses http://).
                "SYNAPSE_CALLBACK_HTTPS_ONLY": "true",
                "SYNAPSE_MODELS": config.models,
                "SYNAPSE_MODEL_CATALOG": config.model_catalog,
                "SYNAPSE_WORKER_PROVIDER": "ecs",
                "SYNAPSE_ECS_CLUSTER": worker_cluster_name,
                "SYNAPSE_ECS_WORKER_SERVICE": worker_service_name,
                # Jobs at zero start instances at once, not after managed scaling's alarm (1-2 min).
                "SYNAPSE_ECS_WORKER_ASGS": worker_group_names,
                "SYNAPSE_MIN_WORKERS": "0",
                "SYNAPSE_MAX_WORKERS": str(config.max_workers),
                "SYNAPSE_SCALE_TO_ZERO_AFTER": str(config.scale_to_zero_after_s),
                "SYNAPSE_METRICS_PORT": str(METRICS_PORT),
                "SYNAPSE_GPU_PRICE_PER_HOUR": str(config.gpu_price_per_hour),
                # The ledger prices this profile's manager and idle resources (stacks/idle_cost.py).
                "SYNAPSE_MANAGER_PRICE_PER_HOUR": f"{idle_cost.manager_price_per_hour(config):.6f}",
                "SYNAPSE_IDLE_OTHER_PRICE_PER_MONTH": f"{idle_cost.other_idle_per_month(config):.2f}",
                "SYNAPSE_LOG_LEVEL": "INFO",
            },
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
            # Lean: the public subnet's address reaches ECR, ECS, CloudWatch and Managed Prometheus
            # without a NAT gateway; the security group still admits only the workers.
            assign_public_ip=public_ip,
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
            "The environment holds only non-secret settings (the SYNAPSE_* contract): ElastiCache is "
            "reached with IAM tokens the task role signs, and the webhook secrets are read from Secrets "
            "Manager by ARN at run time (a tenant added later needs no new task).",
        )


class ManagerStack(cdk.Stack):
    """The workload manager service, the webhook secrets it signs callbacks with and, with
    `synapse:outcomeTopics`, the SNS topics it publishes outcomes to (encrypted with `topic_key`)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        env: cdk.Environment,
        config: SynapseConfig,
        cluster: ecs.ICluster,
        subnets: ec2.SubnetSelection,
        public_ip: bool,
        namespace: servicediscovery.INamespace,
        redis_environment: dict[str, str],
        file_environment: dict[str, str],
        worker_service_name: str,
        worker_group_names: str,
        remote_write_url: str,
        topic_key: kms.IKey,
    ) -> None:
        super().__init__(scope, construct_id, env=env, description="Synapse: workload manager (Fargate)")
        self.webhook_secrets = WebhookSecrets(self, "WebhookSecrets")
        self.outcome_topics = (
            OutcomeTopics(self, "OutcomeTopics", key=topic_key) if config.outcome_topics else None
        )
        notification_environment = dict(self.webhook_secrets.environment)
        if self.outcome_topics is not None:
            notification_environment.update(self.outcome_topics.environment)
        self.manager = ManagerService(
            self,
            "Manager",
            cluster=cluster,
            subnets=subnets,
            public_ip=public_ip,
            namespace=namespace,
            redis_environment=redis_environment,
            notification_environment=notification_environment,
            file_environment=file_environment,
            worker_cluster_name=cluster.cluster_name,
            worker_service_name=worker_service_name,
            worker_group_names=worker_group_names,
            config=config,
        )
        MetricsSidecars(
            self,
            "Metrics",
            task_definition=self.manager.task_definition,
            remote_write_url=remote_write_url,
            region=self.region,
            manager_metrics_port=METRICS_PORT,
        )

        cdk.CfnOutput(
            self,
            "WebhookSecretsName",
            value=self.webhook_secrets.secret.secret_name,
            description="JSON map tenant -> webhook secret. The default tenant's: aws secretsmanager "
            "get-secret-value --secret-id <this> --query SecretString --output text | jq -r .default; "
            "add a tenant with put-secret-value and the whole map (docs/deploy.md)",
        )
        if self.outcome_topics is not None:
            cdk.CfnOutput(
                self,
                "SuccessTopicArn",
                value=self.outcome_topics.success.topic_arn,
                description="Each completed job: aws sns subscribe --topic-arn <this> --protocol sqs",
            )
            cdk.CfnOutput(
                self,
                "ErrorTopicArn",
                value=self.outcome_topics.error.topic_arn,
                description="Each failed job: aws sns subscribe --topic-arn <this> --protocol sqs",
            )
