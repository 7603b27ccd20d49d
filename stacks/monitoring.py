"""Prometheus, Pushgateway, Redis exporter and Grafana on Fargate, found through Cloud Map; Grafana
behind an internal ALB."""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_servicediscovery as servicediscovery
from constructs import Construct

from stacks import images
from stacks.config import GRAFANA_PORT, PROMETHEUS_PORT, PUSHGATEWAY_PORT, REDIS_EXPORTER_PORT
from stacks.nag import suppress, suppress_image_pull_wildcard, task_security_group

_ENV_REASON = (
    "Only non-secret settings are plain environment variables; Grafana's admin password comes "
    "from Secrets Manager through the task's `secrets`."
)


class InternalService(Construct):
    """One Fargate task in the private subnets, with its own security group and (optionally) a DNS name.

    Nothing may connect until a rule is added where the units are composed.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ecs.ICluster,
        subnets: ec2.SubnetSelection,
        image_context: str,
        port: int,
        cpu: int,
        memory_mib: int,
        namespace: servicediscovery.INamespace | None = None,
        discovery_name: str | None = None,
        environment: Mapping[str, str] | None = None,
        secrets: Mapping[str, ecs.Secret] | None = None,
        health_check_path: str | None = None,
        enable_execute_command: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        self.port = port
        self.security_group = task_security_group(
            self, vpc=cluster.vpc, description=f"Synapse {construct_id}: ingress only as granted"
        )
        self.task_definition = ecs.FargateTaskDefinition(
            self,
            "TaskDefinition",
            cpu=cpu,
            memory_limit_mib=memory_mib,
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
        health_check = None
        if health_check_path is not None:
            # The Prometheus images are busybox-based: wget is there, curl is not.
            health_check = ecs.HealthCheck(
                command=["CMD-SHELL", f"wget -q -O /dev/null http://127.0.0.1:{port}{health_check_path}"],
                interval=cdk.Duration.seconds(30),
                timeout=cdk.Duration.seconds(5),
                retries=3,
                start_period=cdk.Duration.seconds(30),
            )
        self.container = self.task_definition.add_container(
            construct_id.lower(),
            image=ecs.ContainerImage.from_asset(
                image_context,
                platform=ecr_assets.Platform.LINUX_AMD64,
                display_name=f"synapse-{construct_id.lower()}",
            ),
            port_mappings=[ecs.PortMapping(container_port=port)],
            environment=dict(environment) if environment else None,
            secrets=dict(secrets) if secrets else None,
            logging=ecs.LogDrivers.aws_logs(stream_prefix=construct_id.lower(), log_group=log_group),
            health_check=health_check,
        )
        cloud_map = None
        if namespace is not None and discovery_name is not None:
            cloud_map = ecs.CloudMapOptions(
                name=discovery_name,
                cloud_map_namespace=namespace,
                dns_record_type=servicediscovery.DnsRecordType.A,
                dns_ttl=cdk.Duration.seconds(10),
            )
        self.service = ecs.FargateService(
            self,
            "Service",
            cluster=cluster,
            task_definition=self.task_definition,
            desired_count=1,
            # One task holding local state (TSDB, Grafana's sqlite): stop the old one before the new.
            min_healthy_percent=0,
            max_healthy_percent=100,
            circuit_breaker=ecs.DeploymentCircuitBreaker(rollback=True),
            security_groups=[self.security_group],
            vpc_subnets=subnets,
            assign_public_ip=False,
            cloud_map_options=cloud_map,
            enable_execute_command=enable_execute_command,
        )
        self.connections = self.service.connections
        suppress_image_pull_wildcard(self.task_definition.obtain_execution_role())


class Grafana(Construct):
    """Grafana with the repository's dashboards, an admin password in Secrets Manager, an internal ALB.

    People reach it through the VPC (VPN, Direct Connect, peering) or with Session Manager port
    forwarding into the task (ECS Exec is on for exactly that); see README, Deploy to AWS.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ecs.ICluster,
        subnets: ec2.SubnetSelection,
        vpc_cidr: str,
        access_logs: s3.IBucket,
    ) -> None:
        super().__init__(scope, construct_id)
        self.admin_secret = secretsmanager.Secret(
            self,
            "AdminPassword",
            description="Synapse Grafana: password of the `admin` user",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=32, exclude_punctuation=True
            ),
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        suppress(
            self.admin_secret,
            "SMG4",
            "Grafana reads GF_SECURITY_ADMIN_PASSWORD only when its database is first created, so "
            "a rotated secret would no longer match the live password; rotate through Grafana's UI "
            "or API, then update the secret (README, Deploy to AWS).",
        )
        self.unit = InternalService(
            self,
            "Grafana",
            cluster=cluster,
            subnets=subnets,
            image_context=images.grafana_context(self),
            port=GRAFANA_PORT,
            cpu=512,
            memory_mib=1024,
            environment={
                "GF_SECURITY_ADMIN_USER": "admin",
                "GF_USERS_ALLOW_SIGN_UP": "false",
                "GF_AUTH_ANONYMOUS_ENABLED": "false",
                # No calls home from a private subnet.
                "GF_ANALYTICS_REPORTING_ENABLED": "false",
                "GF_ANALYTICS_CHECK_FOR_UPDATES": "false",
                "GF_ANALYTICS_CHECK_FOR_PLUGIN_UPDATES": "false",
                "GF_NEWS_NEWS_FEED_ENABLED": "false",
            },
            secrets={"GF_SECURITY_ADMIN_PASSWORD": ecs.Secret.from_secrets_manager(self.admin_secret)},
            enable_execute_command=True,
        )
        suppress(self.unit.task_definition, "ECS2", _ENV_REASON)
        suppress(
            self.unit.task_definition.task_role,
            "IAM5",
            "ECS Exec (used for Session Manager port forwarding to Grafana) needs the ssmmessages "
            "channel actions, which have no resource-level permissions.",
            applies_to=["Resource::*"],
        )

        self.load_balancer_security_group = ec2.SecurityGroup(
            self,
            "LoadBalancerSecurityGroup",
            vpc=cluster.vpc,
            description="Synapse Grafana ALB: HTTP from inside the VPC only",
            allow_all_outbound=False,
        )
        self.load_balancer_security_group.add_ingress_rule(
            ec2.Peer.ipv4(vpc_cidr), ec2.Port.tcp(80), "Grafana from the VPC (VPN, port forwarding)"
        )
        self.load_balancer = elbv2.ApplicationLoadBalancer(
            self,
            "LoadBalancer",
            vpc=cluster.vpc,
            vpc_subnets=subnets,
            internet_facing=False,
            security_group=self.load_balancer_security_group,
            drop_invalid_header_fields=True,
        )
        self.load_balancer.log_access_logs(access_logs, prefix="grafana-alb")
        listener = self.load_balancer.add_listener("Http", port=80, open=False)
        listener.add_targets(
            "Grafana",
            port=GRAFANA_PORT,
            protocol=elbv2.ApplicationProtocol.HTTP,
            targets=[self.unit.service],
            health_check=elbv2.HealthCheck(path="/api/health", healthy_http_codes="200"),
            deregistration_delay=cdk.Duration.seconds(10),
        )


class RedisExporter(Construct):
    """oliver006/redis_exporter on ElastiCache: memory against maxmemory, evictions, clients.

    The queue lives in Redis, so its memory is the platform's capacity to accept jobs; the exporter
    makes that visible and alertable (dashboards/rules.yml). ElastiCache refuses CONFIG, so the
    exporter skips it.
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
    ) -> None:
        super().__init__(scope, construct_id)
        self.unit = InternalService(
            self,
            "RedisExporter",
            cluster=cluster,
            subnets=subnets,
            image_context=images.redis_exporter_context(self),
            port=REDIS_EXPORTER_PORT,
            cpu=256,
            memory_mib=512,
            namespace=namespace,
            discovery_name="redis-exporter",
            environment={"REDIS_ADDR": redis_url, "REDIS_EXPORTER_CONFIG_COMMAND": "-"},
            secrets={"REDIS_PASSWORD": ecs.Secret.from_secrets_manager(redis_auth_secret)},
        )
        suppress(
            self.unit.task_definition,
            "ECS2",
            "Only the Redis address and an exporter option are plain environment variables; the "
            "ElastiCache AUTH token comes from Secrets Manager through the task's `secrets`.",
        )
        self.connections = self.unit.connections


class MonitoringStack(cdk.Stack):
    """Prometheus scrapes the manager, the Pushgateway and the Redis exporter; Grafana shows it."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        env: cdk.Environment,
        cluster: ecs.ICluster,
        subnets: ec2.SubnetSelection,
        namespace: servicediscovery.INamespace,
        vpc_cidr: str,
        access_logs: s3.IBucket,
        redis_url: str,
        redis_auth_secret: secretsmanager.ISecret,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            env=env,
            description="Synapse: Prometheus, Pushgateway, Redis exporter, Grafana",
        )
        self.pushgateway = InternalService(
            self,
            "Pushgateway",
            cluster=cluster,
            subnets=subnets,
            image_context=images.pushgateway_context(self),
            port=PUSHGATEWAY_PORT,
            cpu=256,
            memory_mib=512,
            namespace=namespace,
            discovery_name="pushgateway",
            health_check_path="/-/ready",
        )
        self.prometheus = InternalService(
            self,
            "Prometheus",
            cluster=cluster,
            subnets=subnets,
            image_context=images.prometheus_context(self),
            port=PROMETHEUS_PORT,
            cpu=512,
            memory_mib=2048,
            namespace=namespace,
            discovery_name="prometheus",
            health_check_path="/-/ready",
        )
        self.redis_exporter = RedisExporter(
            self,
            "RedisExporter",
            cluster=cluster,
            subnets=subnets,
            namespace=namespace,
            redis_url=redis_url,
            redis_auth_secret=redis_auth_secret,
        )
        self.grafana = Grafana(
            self,
            "Grafana",
            cluster=cluster,
            subnets=subnets,
            vpc_cidr=vpc_cidr,
            access_logs=access_logs,
        )
        self.prometheus.connections.allow_to(
            self.pushgateway.connections, ec2.Port.tcp(PUSHGATEWAY_PORT), "Prometheus scrapes Pushgateway"
        )
        self.prometheus.connections.allow_to(
            self.redis_exporter.connections,
            ec2.Port.tcp(REDIS_EXPORTER_PORT),
            "Prometheus scrapes the Redis exporter",
        )
        self.grafana.unit.connections.allow_to(
            self.prometheus.connections, ec2.Port.tcp(PROMETHEUS_PORT), "Grafana queries Prometheus"
        )

        cdk.CfnOutput(
            self,
            "GrafanaUrl",
            value=f"http://{self.grafana.load_balancer.load_balancer_dns_name}",
            description="Grafana (internal ALB): reachable from inside the VPC",
        )
        cdk.CfnOutput(
            self,
            "GrafanaAdminSecretArn",
            value=self.grafana.admin_secret.secret_arn,
            description="aws secretsmanager get-secret-value --secret-id <this> --query SecretString",
        )
        cdk.CfnOutput(self, "ClusterName", value=cluster.cluster_name)
        cdk.CfnOutput(self, "GrafanaServiceName", value=self.grafana.unit.service.service_name)
