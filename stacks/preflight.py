"""`synapse preflight`: what stands between this account and a first result, read before `cdk deploy`.

Read-only calls (IAM, Service Quotas, Lambda, API Gateway, SSM, EC2, IAM Identity Center) for the region
and context values the deploy will use; each finding says what resolves it: `--fix`, the flag, the quota
request or the console step. A blocker (the deploy would fail, or succeed and never start a worker)
exits 1. `--fix` creates the missing service-linked roles, the one change it makes to the account; the
zones it picks go to cdk.context.json, where synth reads them (stacks/zones.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any

from stacks import zones
from stacks.config import BUFFERED_HEADROOM, LAMBDA_UNRESERVED_MINIMUM, SynapseConfig, ZoneSource
from stacks.gpu_peak import GpuPeak
from stacks.zones import OfferedZone

# Service Quotas codes (Service Quotas console, EC2 and Lambda).
ON_DEMAND_G_VT_QUOTA = "L-DB2E81BA"  # Running On-Demand G and VT instances (vCPUs)
SPOT_G_VT_QUOTA = "L-3819A6DF"  # All G and VT Spot Instance Requests (vCPUs)
LAMBDA_CONCURRENCY_QUOTA = "L-B99A9384"  # Concurrent executions
# The CDK bootstrap stack's version parameter, under the default qualifier.
BOOTSTRAP_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
# The service-linked roles the stacks' first resources need, by the service that assumes each. A fresh
# account has none until a console or API call of that service creates it, and CloudFormation's first
# cluster or capacity provider can fail with "Unable to assume the service linked role" meanwhile.
SERVICE_LINKED_ROLES = {
    # https://docs.aws.amazon.com/AmazonECS/latest/developerguide/using-service-linked-roles.html
    "AWSServiceRoleForECS": "ecs.amazonaws.com",
    # https://docs.aws.amazon.com/autoscaling/ec2/userguide/autoscaling-service-linked-role.html
    "AWSServiceRoleForAutoScaling": "autoscaling.amazonaws.com",
    # https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/using-service-linked-roles.html
    "AWSServiceRoleForElastiCache": "elasticache.amazonaws.com",
}
# Only with synapse:spot: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/service-linked-roles-spot-instance-requests.html
SPOT_ROLE = ("AWSServiceRoleForEC2Spot", "spot.amazonaws.com")


class Level(StrEnum):
    OK = "ok"
    NOTE = "note"
    BLOCKER = "blocker"


@dataclass(frozen=True)
class Finding:
    check: str
    level: Level
    message: str
    fix: str = ""

    def __str__(self) -> str:
        line = f"[{self.level.upper()}] {self.check}: {self.message}"
        return f"{line}\n    fix: {self.fix}" if self.fix else line


Clients = Callable[[str], Any]  # service name -> boto3 client in the deploy's region


def _quota(clients: Clients, code: str, service: str = "ec2") -> float:
    quotas = clients("service-quotas")
    try:
        return float(quotas.get_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"])
    except quotas.exceptions.NoSuchResourceException:
        return float(
            quotas.get_aws_default_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"]
        )


def _quota_request(code: str, value: int, service: str = "ec2") -> str:
    return (
        f"aws service-quotas request-service-quota-increase --service-code {service} --quota-code {code} "
        f"--desired-value {value} (Service Quotas console; a small GPU increase usually takes a day or two)"
    )


def check_gpu_quota(config: SynapseConfig, clients: Clients) -> list[Finding]:
    peak = GpuPeak.of(config)
    needs = [("Running On-Demand G and VT instances", ON_DEMAND_G_VT_QUOTA, peak.on_demand, False)]
    if config.spot and peak.burst:
        needs.append(("All G and VT Spot Instance Requests", SPOT_G_VT_QUOTA, peak.burst, True))
    findings = []
    for name, code, instances, spot in needs:
        have, need = _quota(clients, code), instances * peak.vcpus
        if have < need:
            findings.append(
                Finding(
                    "gpu quota",
                    Level.BLOCKER,
                    f"'{name}' allows {have:g} vCPUs; the peak needs {need}: {peak.explain(spot_quota=spot)} "
                    "(below it the deploy succeeds, but instances fail to launch and jobs wait to their "
                    "deadline)",
                    _quota_request(code, need),
                )
            )
        else:
            findings.append(Finding("gpu quota", Level.OK, f"'{name}' allows {have:g} vCPUs, {need} needed"))
    return findings


def check_service_linked_roles(
    config: SynapseConfig, clients: Clients, *, fix: bool = False
) -> list[Finding]:
    """Each role the deploy needs; with `fix`, a missing one is created (IAM's own call, no template)."""
    iam = clients("iam")
    roles = dict(SERVICE_LINKED_ROLES)
    if config.spot:
        roles[SPOT_ROLE[0]] = SPOT_ROLE[1]
    findings = []
    for role, service in roles.items():
        try:
            iam.get_role(RoleName=role)
        except iam.exceptions.NoSuchEntityException:
            if fix:
                iam.create_service_linked_role(AWSServiceName=service)
                findings.append(Finding("service-linked role", Level.OK, f"{role} created for {service}"))
            else:
                findings.append(
                    Finding(
                        "service-linked role",
                        Level.BLOCKER,
                        f"{role} is missing: {service} cannot act for the stacks' first resources",
                        f"synapse preflight --fix (or aws iam create-service-linked-role --aws-service-name "
                        f"{service})",
                    )
                )
        else:
            findings.append(Finding("service-linked role", Level.OK, f"{role} exists"))
    return findings


def check_lambda_concurrency(config: SynapseConfig, clients: Clients) -> list[Finding]:
    limit = int(clients("lambda").get_account_settings()["AccountLimit"]["ConcurrentExecutions"])
    reserved = config.stream_reserved_concurrency
    if reserved is None:
        return [
            Finding(
                "lambda concurrency",
                Level.OK,
                f"quota {limit}; nothing reserved (synapse:reserveStreamConcurrency is off)",
            )
        ]
    room = limit - LAMBDA_UNRESERVED_MINIMUM - BUFFERED_HEADROOM
    if reserved > room:
        need = reserved + LAMBDA_UNRESERVED_MINIMUM + BUFFERED_HEADROOM
        return [
            Finding(
                "lambda concurrency",
                Level.BLOCKER,
                f"quota {limit} leaves {room} to reserve; the streaming front door asks {reserved}",
                f"leave out -c synapse:reserveStreamConcurrency=true, or pass -c synapse:accountConcurrency="
                f"{limit}, or {_quota_request(LAMBDA_CONCURRENCY_QUOTA, need, 'lambda')}",
            )
        ]
    return [Finding("lambda concurrency", Level.OK, f"quota {limit}; {reserved} reserved fits")]


def check_api_gateway_role(_config: SynapseConfig, clients: Clients) -> list[Finding]:
    role = clients("apigateway").get_account().get("cloudwatchRoleArn")
    if role:
        return [
            Finding("api gateway logging role", Level.OK, f"the account's is {role}; the deploy keeps it")
        ]
    return [
        Finding(
            "api gateway logging role",
            Level.NOTE,
            "the account has none: SynapseApi creates one and sets it before its stage (nothing to do)",
        )
    ]


def check_bootstrap(config: SynapseConfig, clients: Clients) -> list[Finding]:
    ssm = clients("ssm")
    try:
        version = ssm.get_parameter(Name=BOOTSTRAP_PARAMETER)["Parameter"]["Value"]
    except ssm.exceptions.ParameterNotFound:
        return [
            Finding(
                "cdk bootstrap",
                Level.BLOCKER,
                f"{config.region} is not bootstrapped for the CDK",
                f"npx cdk bootstrap aws://{config.account}/{config.region}",
            )
        ]
    return [Finding("cdk bootstrap", Level.OK, f"bootstrap version {version}")]


def check_zones(
    config: SynapseConfig, clients: Clients, *, record: Callable[[Sequence[OfferedZone]], None] | None = None
) -> list[Finding]:
    """Named zones (-c synapse:availabilityZones) are checked; otherwise zones are picked by zone ID where
    the warm group's type is offered, and handed to `record` (cdk.context.json, where synth reads them)."""
    offered = zones.offerings(clients("ec2"), config.instance_types)
    findings: list[Finding] = []
    if config.zone_source is ZoneSource.NAMED:
        by_name = {zone.name: zone for zone in offered}
        used = [by_name[name] for name in config.availability_zones if name in by_name]
        findings += [
            Finding(
                "zones",
                Level.BLOCKER,
                f"{name} is not an availability zone of this account in {config.region}",
                "leave out -c synapse:availabilityZones, and preflight picks zones by ID",
            )
            for name in config.availability_zones
            if name not in by_name
        ]
        findings += _offered_nowhere(config, used, ", ".join(config.availability_zones))
    else:
        findings += _offered_nowhere(config, offered, config.region)
        picked = zones.pick(offered, config.instance_types)
        used = list(picked)
        if len(picked) >= zones.ZONE_COUNT:
            if record is not None:
                record(picked)
            names = ", ".join(f"{zone.name} ({zone.zone_id})" for zone in picked)
            findings.append(
                Finding("zones", Level.OK, f"picked {names} by zone ID, for synth (cdk.context.json)")
            )
        elif picked:  # none: the warm type is offered nowhere, a blocker already
            findings.append(
                Finding(
                    "zones",
                    Level.BLOCKER,
                    f"only {len(picked)} zone(s) of {config.region} offer {config.instance_type}, the warm "
                    f"group's type; the VPC needs {zones.ZONE_COUNT}",
                    "put a type more zones offer first: -c synapse:instanceTypes="
                    f"{','.join(config.instance_types)} (the warm group runs the first), or another region",
                )
            )
    return findings + [_coverage(config, zone) for zone in used]


def _offered_nowhere(config: SynapseConfig, considered: Sequence[OfferedZone], where: str) -> list[Finding]:
    return [
        Finding(
            "instance types",
            Level.BLOCKER,
            f"no zone of {where} offers {instance_type}"
            + (
                " (the warm group's one type: it can never launch)"
                if instance_type == config.instance_type
                else ""
            ),
            f"drop it from -c synapse:instanceTypes={','.join(config.instance_types)}, or deploy to a region "
            "that offers it",
        )
        for instance_type in config.instance_types
        if not any(instance_type in zone.types for zone in considered)
    ]


def _coverage(config: SynapseConfig, zone: OfferedZone) -> Finding:
    missing = [t for t in config.instance_types if t not in zone.types]
    label = f"{zone.name} ({zone.zone_id})"
    if len(missing) == len(config.instance_types):  # only a named zone: a picked one offers the warm type
        return Finding(
            "instance types",
            Level.BLOCKER,
            f"{label} offers none of {', '.join(config.instance_types)}",
            "leave out -c synapse:availabilityZones, and preflight picks zones that offer them",
        )
    if missing:
        return Finding(
            "instance types",
            Level.NOTE,
            f"{label} lacks {', '.join(missing)}: launches there use the others"
            + (" (the warm pool's type among them)" if config.instance_type in missing else ""),
        )
    return Finding("instance types", Level.OK, f"{label} offers {', '.join(config.instance_types)}")


def check_identity_center(config: SynapseConfig, clients: Clients) -> list[Finding]:
    if not config.managed_grafana:
        return [Finding("identity center", Level.OK, "not needed: Managed Grafana is off")]
    if clients("sso-admin").list_instances()["Instances"]:
        return [Finding("identity center", Level.OK, "enabled, for Managed Grafana's sign-in")]
    return [
        Finding(
            "identity center",
            Level.BLOCKER,
            "synapse:managedGrafana=true needs IAM Identity Center, which this account lacks",
            "enable it (IAM Identity Center console, Enable) or drop -c synapse:managedGrafana=true "
            "and import dashboards/*.json into any Grafana",
        )
    ]


CHECKS = (
    check_gpu_quota,
    check_lambda_concurrency,
    check_api_gateway_role,
    check_bootstrap,
    check_identity_center,
)


def preflight(
    config: SynapseConfig,
    clients: Clients,
    *,
    fix: bool = False,
    record_zones: Callable[[Sequence[OfferedZone]], None] | None = None,
) -> list[Finding]:
    """Every check's findings; `fix` lets the roles check create what is missing, and the zones check
    hands the zones it picks to `record_zones`."""
    checks = (
        partial(check_service_linked_roles, fix=fix),
        *CHECKS,
        partial(check_zones, record=record_zones),
    )
    return [finding for check in checks for finding in check(config, clients)]


def _config(context: Sequence[str]) -> SynapseConfig:
    """The deploy's configuration: cdk.json's context with `-c key=value` on top, as `cdk deploy` reads it."""
    import aws_cdk as cdk

    from stacks.offline_synth import offline_context

    overrides = dict(item.split("=", 1) for item in context)
    return SynapseConfig.from_context(cdk.App(context={**offline_context(), **overrides}))


def _connect(region: str) -> Clients:
    """boto3 clients in `region`, with the credentials the AWS CLI would use."""
    import boto3

    session = boto3.session.Session(region_name=region)

    def client(service: str) -> Any:
        return session.client(service)  # type: ignore[call-overload]

    return client


def main(
    argv: Sequence[str] | None = None,
    connect: Callable[[str], Clients] = _connect,
    context_file: Path = zones.CONTEXT_FILE,
) -> None:
    parser = argparse.ArgumentParser(prog="synapse preflight", description=__doc__)
    parser.add_argument(
        "-c", "--context", action="append", default=[], metavar="KEY=VALUE", help="as given to cdk deploy"
    )
    parser.add_argument(
        "--fix", action="store_true", help="create the missing service-linked roles (IAM), then check"
    )
    args = parser.parse_args(argv)
    # The region as the deploy resolves it (stacks/region.py): -c synapse:region, AWS_REGION, ...
    region = _config(args.context).region
    clients = connect(region)
    account = clients("sts").get_caller_identity()["Account"]
    config = _config([*args.context, f"synapse:account={account}", f"synapse:region={region}"])
    findings = preflight(
        config,
        clients,
        fix=args.fix,
        record_zones=partial(zones.record, context_file, account, region),
    )
    sys.exit(report(findings, config))


def report(findings: Sequence[Finding], config: SynapseConfig) -> int:
    """Prints every finding with its fix; the exit status: 1 where any is a blocker."""
    print("\n".join(str(finding) for finding in findings))
    blockers = [f for f in findings if f.level is Level.BLOCKER]
    print(f"{len(blockers)} blocker(s) for account {config.account} in {config.region}")
    return 1 if blockers else 0


if __name__ == "__main__":
    main()
