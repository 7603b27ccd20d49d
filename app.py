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

from stacks.alarms import AlarmsStack
from stacks.api import ApiStack
from stacks.config import PUSHGATEWAY_PORT, SynapseConfig
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
    monitoring: MonitoringStack
    workers: WorkersStack
    manager: ManagerStack
    api: ApiStack
    alarms: AlarmsStack

    @property
    def stacks(self) -> tuple[cdk.Stack, ...]:
        return (
            self.network,
            self.data,
            self.monitoring,
            self.workers,
            self.manager,
            self.api,
            self.alarms,
        )


def build(app: cdk.App) -> Platform:
    """Adds every Synapse stack to `app`, connects them and turns on cdk-nag."""
    config = SynapseConfig.from_context(app)
    if config.skip_bundling:
        app.node.set_context(BUNDLING_STACKS, [])
    env = cdk.Environment(account=config.account, region=config.region)

    network_stack = NetworkStack(app, "SynapseNetwork", env=env, config=config)
    network = network_stack.network
    vpc = network.vpc
    data = DataStack(app, "SynapseData", env=env, config=config, vpc=vpc, subnets=network.isolated_subnets)
    cache = data.cache
    monitoring = MonitoringStack(app, "SynapseMonitoring", env=env, config=config)
    workers = WorkersStack(
        app,
        "SynapseWorkers",
        env=env,
        config=config,
        vpc=vpc,
        subnets=network.workload_subnets,
        public_ip=network.assign_public_ip,
        redis_environment=cache.environment,
        model_bucket_name=data.model_store.bucket.bucket_name,
        alerts=monitoring.alerts_topic,
    )
    manager = ManagerStack(
        app,
        "SynapseManager",
        env=env,
        config=config,
        cluster=workers.cluster,
        subnets=network.workload_subnets,
        public_ip=network.assign_public_ip,
        namespace=network.namespace,
        redis_environment=cache.environment,
        file_environment=data.files.environment,
        worker_service_name=workers.workers.service.service_name,
        worker_group_names=workers.capacity.group_names,
        remote_write_url=monitoring.remote_write_url,
        topic_key=monitoring.topic_key,
    )
    api = ApiStack(
        app,
        "SynapseApi",
        env=env,
        config=config,
        vpc=vpc,
        subnets=network.isolated_subnets,
        redis_environment=cache.environment,
        file_environment=data.files.environment,
    )

    # Network paths. A cross-stack rule is created in the stack of the side the call starts from
    # (`a.allow_to(b)` puts b's ingress rule in a's stack), so each call starts from the stack that
    # is deployed later; the other order would make the earlier stack depend on the later one.
    front_door, manager_unit, worker_unit = api.front_door.function, manager.manager, workers.workers
    front_door.connections.allow_to_default_port(cache.connections, "front door to ElastiCache")
    # The front door's group has no open egress: the files bucket is reached through the gateway endpoint.
    front_door.connections.allow_to(network.s3, ec2.Port.tcp(443), "front door to S3 (files bucket)")
    manager_unit.connections.allow_to_default_port(cache.connections, "manager to ElastiCache")
    worker_unit.connections.allow_to_default_port(cache.connections, "workers to ElastiCache")
    manager_unit.connections.allow_to(worker_unit.connections, TRITON_PORTS, "manager to Triton")
    manager_unit.connections.allow_from(
        worker_unit.connections, ec2.Port.tcp(PUSHGATEWAY_PORT), "workers push metrics"
    )

    # Permissions across units.
    for client in (front_door, manager_unit.task_role, worker_unit.task_definition.task_role):
        cache.grant_connect(client)
    data.model_store.grant_read_models(worker_unit.task_definition.task_role)
    suppress(
        worker_unit.task_definition.task_role,
        "IAM5",
        "Workers sync whichever checkpoints their models name, so they read any object of the model "
        "store bucket (GetObject on <bucket>/*); that one bucket, read-only.",
        applies_to=[data.model_store.objects_nag_resource],
    )
    # The Files API's bytes: the front door uploads, serves and deletes them; the manager's batch runner
    # reads inputs, writes output files and deletes a batch's input copy when it ends. Both get the same
    # objects under the files prefix.
    for files_user in (front_door, manager_unit.task_role):
        data.files.grant_files(files_user)
        suppress(
            files_user,
            "IAM5",
            "A file's key is its tenant and id (openai_api/file_store.py), made at run time: the grant "
            "names the files bucket's files/ prefix and nothing else of it.",
            applies_to=[data.files.objects_nag_resource],
        )
    worker_unit.grant_scale(manager_unit.task_role)
    workers.capacity.grant_start_instances(manager_unit.task_role)
    workers.capacity.grant_lower_stopped_volumes(manager_unit.task_role)
    monitoring.grant_remote_write(manager_unit.task_role)
    # Callbacks are signed and outcomes published by the manager alone.
    manager.webhook_secrets.grant_read(manager_unit.task_role)
    if manager.outcome_topics is not None:
        manager.outcome_topics.grant_publish(manager_unit.task_role)

    alarms = AlarmsStack(
        app,
        "SynapseAlarms",
        env=env,
        topic=monitoring.alerts_topic,
        auto_scaling_groups=[pool.group for pool in workers.capacity.pools],
        capacity_provider_names=[
            pool.capacity_provider.capacity_provider_name for pool in workers.capacity.pools
        ],
        cluster=workers.cluster,
        worker_service=workers.workers.service,
        cache_name=cache.name,
        functions=[api.front_door.function, api.front_door.stream_function],
        api=api.public_api.api,
    )

    cdk.Tags.of(app).add("project", "synapse")
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return Platform(
        config=config,
        network=network_stack,
        data=data,
        monitoring=monitoring,
        workers=workers,
        manager=manager,
        api=api,
        alarms=alarms,
    )


if __name__ == "__main__":
    cdk_app = cdk.App()
    build(cdk_app)
    cdk_app.synth()
