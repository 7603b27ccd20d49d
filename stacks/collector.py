"""The metrics collector beside the manager: a Pushgateway for the workers and a Prometheus agent that
scrapes it and the manager over loopback and remote-writes to Amazon Managed Service for Prometheus.

Why sidecars: the Pushgateway flow and the scrape config stay those of `dashboards/prometheus.yml`
(the same job names, so every dashboard and rule reads the same series), with no task, load
balancer or disk of their own. The agent keeps no TSDB, only a write-ahead log for samples not yet
sent; AMP keeps the data.

Both containers are non-essential: if one dies the manager keeps dispatching jobs and ECS restarts
the container in place. A dead collector does not go unnoticed: no `up{job="synapse-manager"}`
reaches AMP, and the rules' `SynapseManagerDown` (`absent(...)`) pages.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_logs as logs
from constructs import Construct

from contract.scrape_config import local_prometheus_config, template_scrape_interval
from stacks import images
from stacks.config import PROMETHEUS_PORT, PUSHGATEWAY_PORT

MANAGER_JOB = "synapse-manager"
PUSHGATEWAY_JOB = "pushgateway"
# The environment variable the image's entrypoint writes to its config file (docker/monitoring/prometheus).
CONFIG_VARIABLE = "PROMETHEUS_AGENT_CONFIG"

# What the sidecars take from the task (lean: 0.25 vCPU, 1 GiB in all). Soft reservations are what
# they need with a few hundred series; the hard limits stop a leak from starving the manager.
PROMETHEUS_CPU_UNITS = 32
PROMETHEUS_MEMORY_RESERVATION_MIB = 96
PROMETHEUS_MEMORY_LIMIT_MIB = 192
PUSHGATEWAY_CPU_UNITS = 16
PUSHGATEWAY_MEMORY_RESERVATION_MIB = 32
PUSHGATEWAY_MEMORY_LIMIT_MIB = 64


def agent_config(*, manager_metrics_port: int, remote_write_url: str, region: str) -> dict[str, Any]:
    """`dashboards/prometheus.yml` with loopback targets, no rules (AMP evaluates them) and AMP as the
    remote write target, signed with the task role's credentials (SigV4)."""
    config = local_prometheus_config(
        {
            MANAGER_JOB: f"127.0.0.1:{manager_metrics_port}",
            PUSHGATEWAY_JOB: f"127.0.0.1:{PUSHGATEWAY_PORT}",
        },
        # The template's own interval: the rules' windows and `for:` durations assume it.
        scrape_interval=template_scrape_interval(),
    )
    # An agent evaluates no rules and refuses a config that names rule files.
    del config["rule_files"]
    del config["global"]["evaluation_interval"]
    config["remote_write"] = [{"url": remote_write_url, "sigv4": {"region": region}}]
    return config


class MetricsSidecars(Construct):
    """Adds the Pushgateway and the Prometheus agent to `task_definition` (an ARM64 Fargate task).

    The task role signs the remote writes: grant it with `MonitoringStack.grant_remote_write`.
    Workers push to the task's Pushgateway port, which must be opened to them where units meet.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        task_definition: ecs.FargateTaskDefinition,
        remote_write_url: str,
        region: str,
        manager_metrics_port: int,
    ) -> None:
        super().__init__(scope, construct_id)
        log_group = logs.LogGroup(
            self, "Logs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=cdk.RemovalPolicy.DESTROY
        )
        config = agent_config(
            manager_metrics_port=manager_metrics_port, remote_write_url=remote_write_url, region=region
        )
        self.pushgateway = task_definition.add_container(
            "pushgateway",
            image=_image(self, "PushgatewayImage", images.pushgateway_context(self)),
            essential=False,
            cpu=PUSHGATEWAY_CPU_UNITS,
            memory_reservation_mib=PUSHGATEWAY_MEMORY_RESERVATION_MIB,
            memory_limit_mib=PUSHGATEWAY_MEMORY_LIMIT_MIB,
            # Pushed groups live in memory only: a restart drops them, and each worker pushes again
            # within seconds; no file is written.
            readonly_root_filesystem=True,
            port_mappings=[ecs.PortMapping(container_port=PUSHGATEWAY_PORT, name="pushgateway")],
            health_check=_ready_check(PUSHGATEWAY_PORT),
            enable_restart_policy=True,
            logging=ecs.LogDrivers.aws_logs(stream_prefix="pushgateway", log_group=log_group),
        )
        self.prometheus = task_definition.add_container(
            "prometheus-agent",
            image=_image(self, "PrometheusImage", images.prometheus_context(self)),
            essential=False,
            cpu=PROMETHEUS_CPU_UNITS,
            memory_reservation_mib=PROMETHEUS_MEMORY_RESERVATION_MIB,
            memory_limit_mib=PROMETHEUS_MEMORY_LIMIT_MIB,
            environment={CONFIG_VARIABLE: cdk.Stack.of(self).to_json_string(config)},
            health_check=_ready_check(PROMETHEUS_PORT),
            enable_restart_policy=True,
            logging=ecs.LogDrivers.aws_logs(stream_prefix="prometheus-agent", log_group=log_group),
        )
        self.prometheus.add_container_dependencies(
            ecs.ContainerDependency(
                container=self.pushgateway, condition=ecs.ContainerDependencyCondition.START
            )
        )


def _image(scope: Construct, construct_id: str, context: str) -> ecs.ContainerImage:
    # Built for ARM64 from multi-arch upstream images, into the CDK asset repository (ECR).
    return ecs.ContainerImage.from_docker_image_asset(
        ecr_assets.DockerImageAsset(
            scope,
            construct_id,
            directory=context,
            platform=ecr_assets.Platform.LINUX_ARM64,
            display_name=f"synapse-{construct_id.lower()}",
        )
    )


def _ready_check(port: int) -> ecs.HealthCheck:
    # Both images are busybox-based: wget is there, curl is not.
    return ecs.HealthCheck(
        command=["CMD-SHELL", f"wget -q -O /dev/null http://127.0.0.1:{port}/-/ready || exit 1"],
        interval=cdk.Duration.seconds(30),
        timeout=cdk.Duration.seconds(5),
        retries=3,
        start_period=cdk.Duration.seconds(30),
    )
