#!/usr/bin/env python3
"""The Synapse CDK app: builds the stacks from context values and composes them.

This is the only place that knows the environment, and the place where units meet: every network
path between services and every cross-unit IAM grant is written here, so one screen shows who may
talk to whom. cdk-nag's AwsSolutions checks run on every synth.
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from cdk_nag import AwsSolutionsChecks

from stacks.api import ApiStack
from stacks.config import METRICS_PORT, PUSHGATEWAY_PORT, SynapseConfig
from stacks.data import DataStack
from stacks.manager_service import ManagerStack
from stacks.monitoring import MonitoringStack
from stacks.nag import suppress
from stacks.network import NetworkStack
from stacks.workers import TRITON_PORTS, WorkersStack

# CDK's own switch: bundle no stack's assets (the Lambda's pip install). `-c synapse:skipBundling=true`
# sets it for offline synths and tests, which need templates, not deployable zips.
BUNDLING_STACKS = "aws:cdk:bundling-stacks"


@dataclass(frozen=True, kw_only=True)
class Platform:
    """The stacks of one Synapse deployment, for tests and for tooling."""

    config: SynapseConfig
    network: NetworkStack
    data: DataStack
    workers: WorkersStack
    manager: ManagerStack
    api: ApiStack
    monitoring: MonitoringStack

    @property
    def stacks(self) -> tuple[cdk.Stack, ...]:
        return (self.network, self.data, self.workers, self.manager, self.api, self.monitoring)


def build(app: cdk.App) -> Platform:
    """Adds every Synapse stack to `app`, connects them and turns on cdk-nag."""
    config = SynapseConfig.from_context(app)
    if config.skip_bundling:
        app.node.set_context(BUNDLING_STACKS, [])
    env = cdk.Environment(account=config.account, region=config.region)

    network = NetworkStack(app, "SynapseNetwork", env=env, config=config)
    vpc, subnets = network.network.vpc, network.network.private_subnets
    data = DataStack(app, "SynapseData", env=env, config=config, vpc=vpc, subnets=subnets)
    cache = data.cache
    workers = WorkersStack(
        app,
        "SynapseWorkers",
        env=env,
        config=config,
        vpc=vpc,
        subnets=subnets,
        redis_url=cache.url,
        redis_auth_secret=cache.auth_secret,
        model_bucket_name=data.model_store.bucket.bucket_name,
    )
    manager = ManagerStack(
        app,
        "SynapseManager",
        env=env,
        config=config,
        cluster=workers.cluster,
        subnets=subnets,
        namespace=network.network.namespace,
        redis_url=cache.url,
        redis_auth_secret=cache.auth_secret,
        worker_service_name=workers.workers.service.service_name,
    )
    api = ApiStack(
        app,
        "SynapseApi",
        env=env,
        config=config,
        vpc=vpc,
        subnets=subnets,
        redis_url=cache.url,
        redis_auth_secret_arn=cache.auth_secret.secret_arn,
    )
    monitoring = MonitoringStack(
        app,
        "SynapseMonitoring",
        env=env,
        cluster=workers.cluster,
        subnets=subnets,
        namespace=network.network.namespace,
        vpc_cidr=config.vpc_cidr,
        access_logs=data.access_logs.bucket,
        redis_url=cache.url,
        redis_auth_secret=cache.auth_secret,
    )

    # Network paths. A cross-stack rule is created in the stack of the side the call starts from
    # (`a.allow_to(b)` puts b's ingress rule in a's stack), so each call starts from the stack that
    # is deployed later; the other order would make the earlier stack depend on the later one.
    front_door, manager_unit, worker_unit = api.front_door.function, manager.manager, workers.workers
    front_door.connections.allow_to_default_port(cache.connections, "front door to ElastiCache")
    manager_unit.connections.allow_to_default_port(cache.connections, "manager to ElastiCache")
    worker_unit.connections.allow_to_default_port(cache.connections, "workers to ElastiCache")
    monitoring.redis_exporter.connections.allow_to_default_port(
        cache.connections, "Redis exporter to ElastiCache"
    )
    manager_unit.connections.allow_to(worker_unit.connections, TRITON_PORTS, "manager to Triton")
    monitoring.prometheus.connections.allow_to(
        manager_unit.connections, ec2.Port.tcp(METRICS_PORT), "Prometheus scrapes the manager"
    )
    monitoring.pushgateway.connections.allow_from(
        worker_unit.connections, ec2.Port.tcp(PUSHGATEWAY_PORT), "workers push metrics"
    )

    # Permissions across units.
    cache.auth_secret.grant_read(front_door)
    data.model_store.grant_read_models(worker_unit.task_definition.task_role)
    suppress(
        worker_unit.task_definition.task_role,
        "IAM5",
        "Workers sync whichever checkpoints their models name, so they read any object of the model "
        "store bucket (GetObject on <bucket>/*); that one bucket, read-only.",
        applies_to=[data.model_store.objects_nag_resource],
    )
    worker_unit.grant_scale(manager_unit.task_role)

    cdk.Tags.of(app).add("project", "synapse")
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return Platform(
        config=config,
        network=network,
        data=data,
        workers=workers,
        manager=manager,
        api=api,
        monitoring=monitoring,
    )


if __name__ == "__main__":
    cdk_app = cdk.App()
    build(cdk_app)
    cdk_app.synth()
