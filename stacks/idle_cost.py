"""The idle bill: every resource a deployment pays for while no job runs, at us-east-1 list prices.

docs/deploy.md ("Idle cost") prints `idle_bill(...)` line by line; tests/infra/test_idle_cost.py
checks that the lean total stays within `LEAN_BUDGET` and that every resource type in the synthesized
templates is either priced here (`PRICED_TYPES`) or free while idle (`FREE_AT_IDLE`), so a resource
added later cannot slip into the bill unseen. Prices are the public on-demand list prices for
us-east-1 (late 2025); the ones the cost ledger charges too come from `contract/prices.py`.
Usage-based figures (idle ECPUs, log volume, image size) are stated estimates.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from contract.catalog import Catalog, ModelKind
from contract.prices import (
    CACHE_PER_MILLION_ECPUS,
    FARGATE_ARM_PER_GB_HOUR,
    FARGATE_ARM_PER_VCPU_HOUR,
    HOURS_PER_MONTH,
    VALKEY_MINIMUM_GB,
    VALKEY_PER_GB_HOUR,
)
from contract.scrape_config import template_scrape_interval
from contract.worker_image_size import IMAGE_COMPRESSED_GB
from stacks.config import SynapseConfig

SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600
# Issue 29's ceiling for the lean profile's idle bill with its two models served and the dashboards' data
# kept (docs/deploy.md); it also catches a resource that adds to the bill unseen.
LEAN_BUDGET = 30.0

# Estimate: the manager's idle loop (stream reads, heartbeats, registry scans) at a few dozen small
# commands a second, one ECPU each.
IDLE_ECPU_PER_SECOND = 40

PUBLIC_IPV4_HOUR = 0.005
EBS_GP3_GB_MONTH = 0.08
NAT_GATEWAY_HOUR = 0.045
INTERFACE_ENDPOINT_HOUR = 0.01  # per endpoint per zone
ECR_GB_MONTH = 0.10
# The worker image as ECR stores it (contract/worker_image_size.py), plus the small manager and collector
# images (about 0.5 GB together, estimate); one version of each kept.
IMAGES_GB = IMAGE_COMPRESSED_GB + 0.5
ROUTE53_HOSTED_ZONE_MONTH = 0.50
CLOUDWATCH_ALARM_MONTH = 0.10  # standard resolution (https://aws.amazon.com/cloudwatch/pricing/)
# ECS managed scaling puts a target tracking policy on each capacity provider's group, and target tracking
# creates and manages two alarms of its own (high and low) that no template shows
# (https://docs.aws.amazon.com/autoscaling/ec2/userguide/as-scaling-target-tracking.html).
ALARMS_PER_CAPACITY_PROVIDER = 2
CLOUDWATCH_LOGS_GB = 0.50
# Estimate: flow logs, the manager's and the collector's logs while idle.
IDLE_LOGS_GB_MONTH = 0.5
KMS_KEY_MONTH = 1.00
# Plus $0.05 per 10,000 API calls: the manager reads the webhook secrets only to sign a callback, at
# most once a minute (manager/webhook_secrets.py), so none while idle and at most $0.22 a month.
SECRET_MONTH = 0.40
# Managed Prometheus bills ingestion per sample: $0.90 per 10 million for the first 2 billion a month
# (https://aws.amazon.com/prometheus/pricing/); storage ($0.03/GB-month) of a few hundred series comes to
# under a cent. Every series is sampled once per scrape whether it changes or not.
AMP_PER_10M_SAMPLES = 0.90
# The series the Prometheus agent writes that are no model's own, after the scrape config's drops
# (dashboards/prometheus.yml), once jobs have run: the manager's (process, pool, callbacks, costs, the Batch
# API, counts by tenant and route) 78, counted on `synapse up` serving the lean profile's two models after
# one job of each (225 in all, less the two models' own below and the worker's 3, gone at zero); the
# Pushgateway's build info, 1, once its own Go runtime and HTTP series are dropped; and each of the two
# targets' `up` and four `scrape_*` series, 10.
AMP_BASE_SERIES = 89
# What a served model adds: its queue gauges from the start, and once its first job has run its latency,
# queue-wait, batch and token histograms and counters, which then stay until the manager restarts.
# Counted on the manager's real registry by tests/infra/test_idle_cost.py. Failures add a series per
# reason seen; none at idle.
AMP_SERIES_PER_MODEL: dict[ModelKind, int] = {
    ModelKind.GENERATIVE: 64,
    ModelKind.EMBEDDING: 80,
    ModelKind.ONE_SHOT: 79,
}
# Amazon Managed Grafana bills each workspace at least one Editor licence a month, signed in or not
# (https://aws.amazon.com/grafana/pricing/: $9 per Editor or Admin, $5 per Viewer).
AMG_EDITOR_MONTH = 9.0
# Container Insights (production only): about ten custom metrics for the cluster and its services.
CONTAINER_INSIGHTS_MONTH = 10 * 0.30


@dataclass(frozen=True)
class Line:
    """One always-on item of the bill."""

    resource: str
    detail: str
    monthly_usd: float


def scrape_interval_s() -> float:
    """The Prometheus agent's scrape interval on AWS: the template's (contract/scrape_config.py)."""
    interval = template_scrape_interval()
    units = {"s": 1, "m": 60}
    return float(interval[:-1]) * units[interval[-1]]


def amp_series(config: SynapseConfig) -> int:
    """The series Managed Prometheus ingests at idle once each served model has run a job."""
    catalog = Catalog.from_json(config.model_catalog)
    return AMP_BASE_SERIES + sum(AMP_SERIES_PER_MODEL[catalog[name].kind] for name in catalog.names())


def idle_bill(
    config: SynapseConfig, *, alarms: int, kms_keys: int, secrets: int, capacity_providers: int = 0
) -> list[Line]:
    """The monthly bill of a deployment of `config` with no traffic; `alarms`, `kms_keys`, `secrets` and
    `capacity_providers` are counted on the synthesized templates (other stacks own them)."""
    defaults = config.defaults
    alarms += ALARMS_PER_CAPACITY_PROVIDER * capacity_providers
    series = amp_series(config)
    samples = series * SECONDS_PER_MONTH / scrape_interval_s()
    vcpu = defaults.manager_cpu / 1024
    memory_gb = defaults.manager_memory_mib / 1024
    lines = [
        Line(
            "ElastiCache Serverless (Valkey), storage",
            f"{VALKEY_MINIMUM_GB * 1000:.0f} MB minimum x ${VALKEY_PER_GB_HOUR}/GB-hour",
            VALKEY_MINIMUM_GB * VALKEY_PER_GB_HOUR * HOURS_PER_MONTH,
        ),
        Line(
            "ElastiCache Serverless (Valkey), ECPUs",
            f"~{IDLE_ECPU_PER_SECOND}/s while idle x ${CACHE_PER_MILLION_ECPUS}/million",
            IDLE_ECPU_PER_SECOND * SECONDS_PER_MONTH / 1e6 * CACHE_PER_MILLION_ECPUS,
        ),
        Line(
            "Manager task (Fargate, ARM64)",
            f"{vcpu:g} vCPU, {memory_gb:g} GB, with the metrics sidecars",
            (vcpu * FARGATE_ARM_PER_VCPU_HOUR + memory_gb * FARGATE_ARM_PER_GB_HOUR) * HOURS_PER_MONTH,
        ),
        Line(
            "Stopped warm-pool instances, root volumes (gp3)",
            f"{config.warm_pool_size} x {config.worker_disk_gb} GB x ${EBS_GP3_GB_MONTH}/GB-month",
            config.warm_pool_size * config.worker_disk_gb * EBS_GP3_GB_MONTH,
        ),
        Line("ECR image storage", f"~{IMAGES_GB:g} GB x ${ECR_GB_MONTH}/GB-month", IMAGES_GB * ECR_GB_MONTH),
        Line("Route 53 private hosted zone (Cloud Map)", "synapse.internal", ROUTE53_HOSTED_ZONE_MONTH),
        Line(
            "CloudWatch alarms",
            f"{alarms} x ${CLOUDWATCH_ALARM_MONTH} ({ALARMS_PER_CAPACITY_PROVIDER * capacity_providers} of "
            "them ECS managed scaling's)",
            alarms * CLOUDWATCH_ALARM_MONTH,
        ),
        Line(
            "CloudWatch Logs ingestion",
            f"~{IDLE_LOGS_GB_MONTH:g} GB x ${CLOUDWATCH_LOGS_GB}/GB",
            IDLE_LOGS_GB_MONTH * CLOUDWATCH_LOGS_GB,
        ),
        Line("KMS customer-managed keys", f"{kms_keys} x ${KMS_KEY_MONTH}", kms_keys * KMS_KEY_MONTH),
        Line(
            "Secrets Manager secrets (webhook secrets)",
            f"{secrets} x ${SECRET_MONTH}",
            secrets * SECRET_MONTH,
        ),
        Line(
            "Amazon Managed Service for Prometheus",
            f"~{series} series every {scrape_interval_s():g} s: {samples / 1e6:.1f} M samples x "
            f"${AMP_PER_10M_SAMPLES}/10 M",
            samples / 1e7 * AMP_PER_10M_SAMPLES,
        ),
    ]
    if config.managed_grafana:
        lines.append(
            Line("Amazon Managed Grafana", "one Editor licence, billed even unused", AMG_EDITOR_MONTH)
        )
    if config.private_workloads:
        endpoints = 3 * len(config.availability_zones)
        lines += [
            Line(
                "NAT gateways and their public IPv4",
                f"{config.nat_gateways} x (${NAT_GATEWAY_HOUR} + ${PUBLIC_IPV4_HOUR})/hour",
                config.nat_gateways * (NAT_GATEWAY_HOUR + PUBLIC_IPV4_HOUR) * HOURS_PER_MONTH,
            ),
            Line(
                "Interface endpoints (ECR API, ECR Docker, Logs)",
                f"{endpoints} endpoint-zones x ${INTERFACE_ENDPOINT_HOUR}/hour",
                endpoints * INTERFACE_ENDPOINT_HOUR * HOURS_PER_MONTH,
            ),
        ]
    else:
        lines.append(
            Line(
                "Manager's public IPv4 address",
                f"${PUBLIC_IPV4_HOUR}/hour",
                PUBLIC_IPV4_HOUR * HOURS_PER_MONTH,
            )
        )
    if defaults.container_insights:
        lines.append(Line("ECS Container Insights", "~10 metrics x $0.30", CONTAINER_INSIGHTS_MONTH))
    return lines


def total(lines: list[Line]) -> float:
    return sum(line.monthly_usd for line in lines)


MANAGER_LINE = "Manager task"
CACHE_LINE = "ElastiCache Serverless"


def manager_price_per_hour(config: SynapseConfig) -> float:
    """The manager task's price, which the cost ledger reads as SYNAPSE_MANAGER_PRICE_PER_HOUR."""
    bill = idle_bill(config, alarms=0, kms_keys=0, secrets=0)
    (line,) = [x for x in bill if x.resource.startswith(MANAGER_LINE)]
    return line.monthly_usd / HOURS_PER_MONTH


def other_idle_per_month(config: SynapseConfig, *, kms_keys: int = 1, secrets: int = 1) -> float:
    """The idle bill but the manager and the cache (priced apart): SYNAPSE_IDLE_OTHER_PRICE_PER_MONTH.

    Alarms ($0.10 each) are left out: the manager's stack is built before the alarms are.
    """
    return total(
        [
            x
            for x in idle_bill(config, alarms=0, kms_keys=kms_keys, secrets=secrets)
            if not x.resource.startswith((MANAGER_LINE, CACHE_LINE))
        ]
    )


# The resource types on the bill above, each with the start of the line that prices it. A VPC
# endpoint is named with its kind: a gateway endpoint (S3) is free, an interface endpoint is not.
PRICED_TYPES = {
    "AWS::ElastiCache::ServerlessCache": "ElastiCache Serverless (Valkey)",
    "AWS::ECS::Service": "Manager task",  # the worker service runs no task while idle
    "AWS::AutoScaling::WarmPool": "Stopped warm-pool instances",
    "AWS::ServiceDiscovery::PrivateDnsNamespace": "Route 53 private hosted zone",
    "AWS::CloudWatch::Alarm": "CloudWatch alarms",
    "AWS::Logs::LogGroup": "CloudWatch Logs",
    "AWS::EC2::FlowLog": "CloudWatch Logs",
    "AWS::KMS::Key": "KMS customer-managed keys",
    "AWS::SecretsManager::Secret": "Secrets Manager secrets",
    "AWS::APS::Workspace": "Amazon Managed Service for Prometheus",
    "AWS::Grafana::Workspace": "Amazon Managed Grafana",
    "AWS::EC2::NatGateway": "NAT gateways",
    "AWS::EC2::EIP": "NAT gateways",
    "AWS::EC2::VPCEndpoint:Interface": "Interface endpoints",
}

# Resource types that cost nothing while no job runs (billed per request, per use, or never).
FREE_AT_IDLE = {
    "AWS::ApiGateway::ApiKey": "per request",
    "AWS::ApiGateway::Account": "no charge",
    "AWS::ApiGateway::Authorizer": "per request",
    "AWS::ApiGateway::Deployment": "per request",
    "AWS::ApiGateway::GatewayResponse": "per request",
    "AWS::ApiGateway::Method": "per request",
    "AWS::ApiGateway::Model": "per request",
    "AWS::ApiGateway::RequestValidator": "per request",
    "AWS::ApiGateway::Resource": "per request",
    "AWS::ApiGateway::RestApi": "per request",
    "AWS::ApiGateway::Stage": "per request",
    "AWS::ApiGateway::UsagePlan": "per request",
    "AWS::ApiGateway::UsagePlanKey": "per request",
    "AWS::APS::RuleGroupsNamespace": "rule evaluation is billed with the samples it queries (AMP line)",
    "AWS::AutoScaling::AutoScalingGroup": "no charge; its instances are warm (priced) or serve jobs",
    "AWS::AutoScaling::LifecycleHook": "no charge",
    # Billed per build minute (https://aws.amazon.com/codebuild/pricing/): a deploy with a new worker source.
    "AWS::CodeBuild::Project": "per build minute, during a deploy only",
    "AWS::EC2::InternetGateway": "no charge",
    "AWS::EC2::LaunchTemplate": "no charge",
    "AWS::EC2::Route": "no charge",
    "AWS::EC2::RouteTable": "no charge",
    "AWS::EC2::SecurityGroup": "no charge",
    "AWS::EC2::SecurityGroupEgress": "no charge",
    "AWS::EC2::SecurityGroupIngress": "no charge",
    "AWS::EC2::Subnet": "no charge",
    "AWS::EC2::SubnetRouteTableAssociation": "no charge",
    "AWS::EC2::VPC": "no charge",
    "AWS::EC2::VPCEndpoint:Gateway": "no charge (S3 gateway endpoint)",
    "AWS::EC2::VPCGatewayAttachment": "no charge",
    "AWS::ECR::Repository": "per GB stored: the worker image, in the ECR image storage line",
    "AWS::ECS::CapacityProvider": "no charge",
    "AWS::ECS::Cluster": "no charge (Container Insights priced where on)",
    "AWS::ECS::ClusterCapacityProviderAssociations": "no charge",
    "AWS::ECS::TaskDefinition": "no charge",
    "AWS::ElastiCache::User": "no charge",
    "AWS::ElastiCache::UserGroup": "no charge",
    "AWS::Events::Rule": "AWS service events to a rule are free",
    "AWS::IAM::InstanceProfile": "no charge",
    "AWS::IAM::Policy": "no charge",
    "AWS::IAM::Role": "no charge",
    "AWS::Lambda::Function": "per request and duration",
    "AWS::Lambda::Permission": "no charge",
    # An empty bucket costs nothing (S3 bills storage and requests: https://aws.amazon.com/s3/pricing/),
    # nor does SSE-KMS with the AWS-managed aws/s3 key, which has no monthly fee.
    "AWS::S3::Bucket": "per GB stored: empty model store and files bucket, a few MB of access logs: $0",
    "AWS::S3::BucketPolicy": "no charge",
    "AWS::SNS::Topic": "per message",
    "AWS::StepFunctions::StateMachine": "per state transition: the worker image build's waiter, in a deploy",
    "AWS::SNS::TopicPolicy": "no charge",
    "AWS::SNS::Subscription": "per message",
    "AWS::ServiceDiscovery::Service": "per query, first million free",
    "Custom::AWS": "one Lambda call per deploy",
    "Custom::SynapseApiGatewayAccountRole": "one Lambda call per deploy",
    "Custom::SynapseGrafanaProvisioning": "one Lambda call per deploy",
    "Custom::SynapseWorkerImageBuild": "Lambda calls every 30 s while the image builds, in a deploy",
    "Custom::VpcRestrictDefaultSG": "one Lambda call per deploy",
}


def _synthesized_bill(profile: str) -> list[Line]:
    """The bill of the app as synth builds it for `profile`, alarms and keys counted in its templates."""
    import tempfile

    import aws_cdk as cdk

    from stacks.offline_synth import load_app_module, offline_context

    with tempfile.TemporaryDirectory(prefix="synapse-idle-cost-") as outdir:
        app = cdk.App(context={**offline_context(), "synapse:profile": profile}, outdir=outdir)
        platform = load_app_module().build(app)
        assembly = app.synth()
        types = [
            resource["Type"]
            for stack in platform.stacks
            for resource in assembly.get_stack_artifact(stack.artifact_id).template["Resources"].values()
        ]
    return idle_bill(
        platform.config,
        alarms=types.count("AWS::CloudWatch::Alarm"),
        kms_keys=types.count("AWS::KMS::Key"),
        secrets=types.count("AWS::SecretsManager::Secret"),
        capacity_providers=types.count("AWS::ECS::CapacityProvider"),
    )


def table(bill: list[Line]) -> list[str]:
    """The bill as docs/deploy.md's idle table rows (tests/infra/test_idle_cost.py keeps the page equal)."""
    rows = [f"| {line.resource} | {line.detail} | ${line.monthly_usd:.2f} |" for line in bill]
    return [*rows, f"| **total** | | **${total(bill):.2f}** |"]


if __name__ == "__main__":
    # `python -m stacks.idle_cost [lean|production]`: docs/deploy.md's idle table, from the synthesized app.
    print("\n".join(table(_synthesized_bill(sys.argv[1] if len(sys.argv) > 1 else "lean"))))
