"""`synapse preflight` against accounts described by botocore's Stubber: a fresh account's blockers are each
reported with their fix and exit 1; an account that is ready passes."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import boto3
import pytest
from aws_cdk.assertions import Template
from botocore.stub import Stubber

from stacks.config import SynapseConfig, ZoneSource
from stacks.network import NetworkStack
from stacks.offline_synth import offline_context
from stacks.preflight import (
    BOOTSTRAP_PARAMETER,
    LAMBDA_CONCURRENCY_QUOTA,
    ON_DEMAND_G_VT_QUOTA,
    SERVICE_LINKED_ROLES,
    SPOT_G_VT_QUOTA,
    SPOT_ROLE,
    Clients,
    Finding,
    Level,
    main,
    preflight,
    report,
)

REGION = "eu-west-1"
ZONES = ("eu-west-1a", "eu-west-1b")
ZONE_CONTEXT = ["-c", f"synapse:availabilityZones={','.join(ZONES)}"]
# This account's names for the region's zones: a name is the account's own alias of a zone ID.
ZONE_IDS = {"eu-west-1a": "euw1-az3", "eu-west-1b": "euw1-az1", "eu-west-1c": "euw1-az2"}


def config(**context: str) -> SynapseConfig:
    base = {"region": REGION, "account": "123456789012", "availabilityZones": ",".join(ZONES)}
    return SynapseConfig.from_context(
        cdk.App(context={f"synapse:{k}": v for k, v in {**base, **context}.items()})
    )


def role_answer(name: str) -> dict[str, Any]:
    return {
        "Role": {
            "Path": "/aws-service-role/",
            "RoleName": name,
            "RoleId": "AROAEXAMPLEEXAMPLE01",
            "Arn": f"arn:aws:iam::123456789012:role/aws-service-role/{name}",
            "CreateDate": datetime(2026, 1, 1, tzinfo=UTC),
        }
    }


class Account:
    """Stubbed clients of one account; each test queues the answers its checks will read, in order."""

    def __init__(self, stack: ExitStack) -> None:
        credentials = {"aws_access_key_id": "x", "aws_secret_access_key": "x", "region_name": REGION}
        self.clients = {
            name: boto3.client(name, **credentials)  # type: ignore[call-overload]
            for name in ("sts", "iam", "service-quotas", "lambda", "apigateway", "ssm", "ec2", "sso-admin")
        }
        self.stubs = {name: stack.enter_context(Stubber(client)) for name, client in self.clients.items()}

    def quota(self, code: str, value: float) -> None:
        self.stubs["service-quotas"].add_response(
            "get_service_quota",
            {"Quota": {"QuotaCode": code, "Value": value}},
            {"ServiceCode": "ec2", "QuotaCode": code},
        )

    def answer(
        self,
        *,
        gpu_vcpus: float,
        concurrency: int,
        role: str | None,
        bootstrapped: bool,
        offered: dict[str, list[str]],
        missing_roles: Collection[str] = (),
        spot: bool = False,
        fix: bool = False,
    ) -> None:
        roles = {**SERVICE_LINKED_ROLES, **(dict([SPOT_ROLE]) if spot else {})}
        for name, service in roles.items():
            if name in missing_roles:
                self.stubs["iam"].add_client_error("get_role", "NoSuchEntity", http_status_code=404)
                if fix:
                    self.stubs["iam"].add_response(
                        "create_service_linked_role", {}, {"AWSServiceName": service}
                    )
            else:
                self.stubs["iam"].add_response("get_role", role_answer(name), {"RoleName": name})
        self.quota(ON_DEMAND_G_VT_QUOTA, gpu_vcpus)
        self.stubs["lambda"].add_response(
            "get_account_settings", {"AccountLimit": {"ConcurrentExecutions": concurrency}}
        )
        self.stubs["apigateway"].add_response("get_account", {"cloudwatchRoleArn": role} if role else {})
        if bootstrapped:
            self.stubs["ssm"].add_response(
                "get_parameter",
                {"Parameter": {"Name": BOOTSTRAP_PARAMETER, "Value": "30"}},
                {"Name": BOOTSTRAP_PARAMETER},
            )
        else:
            self.stubs["ssm"].add_client_error("get_parameter", "ParameterNotFound", http_status_code=400)
        self.stubs["ec2"].add_response(
            "describe_availability_zones",
            {
                "AvailabilityZones": [
                    {
                        "ZoneName": name,
                        "ZoneId": zone_id,
                        "ZoneType": "availability-zone",
                        "State": "available",
                    }
                    for name, zone_id in ZONE_IDS.items()
                ]
            },
        )
        offerings = [
            {"InstanceType": t, "LocationType": "availability-zone-id", "Location": ZONE_IDS[zone]}
            for zone, types in offered.items()
            for t in types
        ]
        self.stubs["ec2"].add_response(
            "describe_instance_type_offerings",
            {"InstanceTypeOfferings": offerings},
            {
                "LocationType": "availability-zone-id",
                "Filters": [{"Name": "instance-type", "Values": ["g5.xlarge", "g6.xlarge"]}],
            },
        )

    def run(self, chosen: SynapseConfig, *, fix: bool = False) -> list[Finding]:
        findings = preflight(chosen, self.clients.__getitem__, fix=fix)
        for stub in self.stubs.values():
            stub.assert_no_pending_responses()
        return findings


@pytest.fixture
def account() -> Iterator[Account]:
    with ExitStack() as stack:
        yield Account(stack)


EVERYWHERE = {zone: ["g5.xlarge", "g6.xlarge"] for zone in ZONES}


def blockers(findings: list[Finding]) -> dict[str, Finding]:
    return {f.check: f for f in findings if f.level is Level.BLOCKER}


def test_an_account_that_is_ready_has_no_blocker(account: Account) -> None:
    account.answer(
        gpu_vcpus=64, concurrency=1000, role="arn:aws:iam::1:role/x", bootstrapped=True, offered=EVERYWHERE
    )
    assert blockers(account.run(config())) == {}


def test_a_fresh_account_is_told_each_blocker_with_its_fix(account: Account) -> None:
    """0 GPU vCPUs, a reduced Lambda quota, no logging role, not bootstrapped, one zone without the types."""
    account.answer(
        gpu_vcpus=0, concurrency=10, role=None, bootstrapped=False, offered={ZONES[0]: ["g6.xlarge"]}
    )
    findings = account.run(config())
    found = blockers(findings)
    assert set(found) == {"gpu quota", "cdk bootstrap", "instance types"}
    # lean: the warm group's 1 instance doubled by a refresh, 1 refilling its pool, the burst group's 1
    # doubled: 5 instances of 4 vCPUs.
    assert f"--quota-code {ON_DEMAND_G_VT_QUOTA} --desired-value 20" in found["gpu quota"].fix
    assert found["cdk bootstrap"].fix == f"npx cdk bootstrap aws://123456789012/{REGION}"
    assert (
        ZONES[1] in found["instance types"].message
        and "synapse:availabilityZones" in found["instance types"].fix
    )
    # Nothing reserved by default and the role is made by the deploy: a reduced quota and no role pass.
    levels = {f.check: f.level for f in findings}
    assert levels["lambda concurrency"] is Level.OK and levels["api gateway logging role"] is Level.NOTE
    notes = [f for f in findings if f.check == "instance types" and f.level is Level.NOTE]
    assert notes and "warm pool" in notes[0].message  # g5.xlarge, the warm pool's type, lacks in zone a


def test_an_asked_reservation_the_quota_cannot_hold_is_a_blocker(account: Account) -> None:
    account.answer(gpu_vcpus=64, concurrency=400, role="r", bootstrapped=True, offered=EVERYWHERE)
    found = blockers(account.run(config(reserveStreamConcurrency="true", accountConcurrency="1000")))
    assert set(found) == {"lambda concurrency"}
    assert LAMBDA_CONCURRENCY_QUOTA in found["lambda concurrency"].fix
    assert "synapse:accountConcurrency=400" in found["lambda concurrency"].fix


def test_spot_needs_the_spot_quota_for_the_burst_group(account: Account) -> None:
    account.answer(gpu_vcpus=12, concurrency=1000, role="r", bootstrapped=True, offered=EVERYWHERE, spot=True)
    account.quota(SPOT_G_VT_QUOTA, 0)  # read after the on-demand quota
    found = blockers(account.run(config(spot="true")))
    assert set(found) == {"gpu quota"} and SPOT_G_VT_QUOTA in found["gpu quota"].fix


def test_managed_grafana_without_identity_center_is_a_blocker(account: Account) -> None:
    account.answer(gpu_vcpus=64, concurrency=1000, role="r", bootstrapped=True, offered=EVERYWHERE)
    account.stubs["sso-admin"].add_response("list_instances", {"Instances": []})
    found = blockers(account.run(config(managedGrafana="true")))
    assert set(found) == {"identity center"}
    assert "synapse:managedGrafana" in found["identity center"].fix


def test_every_finding_prints_its_fix_under_it() -> None:
    finding = Finding(
        "cdk bootstrap", Level.BLOCKER, "not bootstrapped", "npx cdk bootstrap aws://1/eu-west-1"
    )
    assert (
        str(finding)
        == "[BLOCKER] cdk bootstrap: not bootstrapped\n    fix: npx cdk bootstrap aws://1/eu-west-1"
    )


def test_a_blocker_exits_1_and_a_clean_account_0(
    account: Account, capsys: pytest.CaptureFixture[str]
) -> None:
    account.answer(gpu_vcpus=0, concurrency=1000, role="r", bootstrapped=True, offered=EVERYWHERE)
    assert report(account.run(config()), config()) == 1
    printed = capsys.readouterr().out
    assert "[BLOCKER] gpu quota" in printed and "fix: aws service-quotas" in printed
    assert printed.rstrip().endswith(f"1 blocker(s) for account 123456789012 in {REGION}")
    assert report([Finding("cdk bootstrap", Level.OK, "bootstrap version 30")], config()) == 0


def test_synapse_preflight_is_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    from local_stack.cli import main

    with pytest.raises(SystemExit) as done:
        main(["preflight", "--help"])
    assert done.value.code == 0
    assert "synapse preflight" in capsys.readouterr().out


def test_a_region_given_only_by_aws_region_is_the_one_checked(
    account: Account, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the docs say: `export AWS_REGION=eu-west-1`, then `synapse preflight` with no -c."""
    for name in ("AWS_DEFAULT_REGION", "CDK_DEFAULT_REGION", "CDK_DEFAULT_ACCOUNT", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_REGION", REGION)
    account.stubs["sts"].add_response(
        "get_caller_identity", {"Account": "123456789012", "Arn": "arn:aws:iam::123456789012:user/x"}
    )
    account.answer(gpu_vcpus=64, concurrency=1000, role="r", bootstrapped=False, offered=EVERYWHERE)
    asked: list[str] = []

    def connect(region: str) -> Clients:
        asked.append(region)
        return account.clients.__getitem__

    with pytest.raises(SystemExit) as done:
        main([], connect=connect, context_file=tmp_path / "cdk.context.json")
    assert asked == [REGION] and done.value.code == 1
    printed = capsys.readouterr().out
    assert f"fix: npx cdk bootstrap aws://123456789012/{REGION}" in printed
    assert printed.rstrip().endswith(f"for account 123456789012 in {REGION}")


def test_a_fresh_account_without_the_ecs_role_gpu_quota_or_g5_exits_1_naming_each(
    account: Account, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_REGION", REGION)
    account.stubs["sts"].add_response("get_caller_identity", {"Account": "123456789012"})
    g6_only = {zone: ["g6.xlarge"] for zone in ZONES}
    account.answer(
        gpu_vcpus=0,
        concurrency=1000,
        role="r",
        bootstrapped=True,
        offered=g6_only,
        missing_roles={"AWSServiceRoleForECS"},
    )
    with pytest.raises(SystemExit) as done:
        main(ZONE_CONTEXT, connect=lambda _: account.clients.__getitem__)
    assert done.value.code == 1
    printed = capsys.readouterr().out
    blocked = [line for line in printed.splitlines() if line.startswith("[BLOCKER]")]
    assert any("AWSServiceRoleForECS is missing" in line for line in blocked)
    assert any("gpu quota" in line and "needs 20" in line for line in blocked)
    assert any("offers g5.xlarge (the warm group's one type" in line for line in blocked)
    assert "--aws-service-name ecs.amazonaws.com" in printed


def test_fix_creates_the_missing_roles_and_checks_on(
    account: Account, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_REGION", REGION)
    account.stubs["sts"].add_response("get_caller_identity", {"Account": "123456789012"})
    account.answer(
        gpu_vcpus=64,
        concurrency=1000,
        role="r",
        bootstrapped=True,
        offered=EVERYWHERE,
        missing_roles={"AWSServiceRoleForECS", "AWSServiceRoleForElastiCache"},
        fix=True,  # create_service_linked_role is stubbed for each, with its service's name
    )
    with pytest.raises(SystemExit) as done:
        main(["--fix", *ZONE_CONTEXT], connect=lambda _: account.clients.__getitem__)
    assert done.value.code == 0
    printed = capsys.readouterr().out
    assert "[OK] service-linked role: AWSServiceRoleForECS created for ecs.amazonaws.com" in printed
    assert "AWSServiceRoleForElastiCache created for elasticache.amazonaws.com" in printed
    for stub in account.stubs.values():
        stub.assert_no_pending_responses()


def test_spot_needs_its_service_linked_role_too(account: Account) -> None:
    account.answer(
        gpu_vcpus=64,
        concurrency=1000,
        role="r",
        bootstrapped=True,
        offered=EVERYWHERE,
        missing_roles={SPOT_ROLE[0]},
        spot=True,
    )
    account.quota(SPOT_G_VT_QUOTA, 64)
    found = blockers(account.run(config(spot="true")))
    assert set(found) == {"service-linked role"}
    assert "spot.amazonaws.com" in found["service-linked role"].fix


def test_synth_takes_its_zones_from_preflights_answer(
    account: Account, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Preflight picks by zone ID and writes cdk.context.json; synth, given that file as the CDK CLI gives
    it, builds the VPC there. Here eu-west-1a (euw1-az3) offers no g5.xlarge, the warm group's type."""
    deployer = "111122223333"
    monkeypatch.setenv("AWS_REGION", REGION)
    account.stubs["sts"].add_response("get_caller_identity", {"Account": deployer})
    both = ["g5.xlarge", "g6.xlarge"]
    offered = {"eu-west-1a": ["g6.xlarge"], "eu-west-1b": both, "eu-west-1c": both}
    account.answer(gpu_vcpus=64, concurrency=1000, role="r", bootstrapped=True, offered=offered)
    context_file = tmp_path / "cdk.context.json"
    context_file.write_text('{"availability-zones:account=1:region=x": ["kept"]}')  # the CLI's own lookups
    with pytest.raises(SystemExit) as done:
        main([], connect=lambda _: account.clients.__getitem__, context_file=context_file)
    assert done.value.code == 0
    answer = json.loads(context_file.read_text())
    assert answer.pop("availability-zones:account=1:region=x") == ["kept"]
    assert answer == {
        f"synapse:zones:account={deployer}:region={REGION}": [
            {"zoneId": "euw1-az1", "zoneName": "eu-west-1b"},
            {"zoneId": "euw1-az2", "zoneName": "eu-west-1c"},
        ]
    }

    monkeypatch.setenv("CDK_DEFAULT_ACCOUNT", deployer)  # as `cdk synth` sets it from the credentials
    app = cdk.App(context={**offline_context(), **answer})
    chosen = SynapseConfig.from_context(app)
    assert (chosen.zone_source, chosen.availability_zones) == (
        ZoneSource.PREFLIGHT,
        ("eu-west-1b", "eu-west-1c"),
    )
    network = NetworkStack(
        app, "SynapseNetwork", env=cdk.Environment(account=deployer, region=REGION), config=chosen
    )
    subnets = Template.from_stack(network).find_resources("AWS::EC2::Subnet").values()
    assert {subnet["Properties"]["AvailabilityZone"] for subnet in subnets} == {"eu-west-1b", "eu-west-1c"}
