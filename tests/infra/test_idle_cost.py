"""The idle bill: the lean profile stays within its budget, and nothing always-on goes unpriced."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest

from stacks.config import SynapseConfig
from stacks.idle_cost import FREE_AT_IDLE, LEAN_BUDGET, PRICED_TYPES, idle_bill, total
from tests.infra import cfn

pytestmark = pytest.mark.infra


def resource_types(raw: dict[str, dict[str, Any]]) -> set[str]:
    """Every resource type in the templates; a VPC endpoint with its kind (gateway or interface)."""
    found = set()
    for template in raw.values():
        for resource in template["Resources"].values():
            kind = resource["Type"]
            if kind == "AWS::EC2::VPCEndpoint":
                kind += ":" + resource["Properties"]["VpcEndpointType"]
            found.add(kind)
    return found


def count(raw: dict[str, dict[str, Any]], resource_type: str) -> int:
    return sum(len(cfn.resources(template, resource_type)) for template in raw.values())


@pytest.fixture(scope="module")
def lean_bill(platform: Any, raw: dict[str, dict[str, Any]]) -> list[Any]:
    return idle_bill(
        platform.config,
        alarms=count(raw, "AWS::CloudWatch::Alarm"),
        kms_keys=count(raw, "AWS::KMS::Key"),
        secrets=count(raw, "AWS::SecretsManager::Secret"),
    )


def test_the_lean_profile_idles_within_its_budget(platform: Any, lean_bill: list[Any]) -> None:
    assert platform.config.profile == "lean"
    assert total(lean_bill) <= LEAN_BUDGET, "\n".join(f"{x.monthly_usd:7.2f} {x.resource}" for x in lean_bill)


def test_every_resource_type_is_priced_or_free_while_idle(raw: dict[str, dict[str, Any]]) -> None:
    unpriced = resource_types(raw) - PRICED_TYPES.keys() - FREE_AT_IDLE.keys()
    assert unpriced == set(), f"price these in stacks/idle_cost.py: {sorted(unpriced)}"


def test_every_priced_type_in_the_templates_has_its_line(
    raw: dict[str, dict[str, Any]], lean_bill: list[Any]
) -> None:
    for resource_type in resource_types(raw) & PRICED_TYPES.keys():
        line_start = PRICED_TYPES[resource_type]
        lines = [line for line in lean_bill if line.resource.startswith(line_start)]
        assert lines and all(line.monthly_usd >= 0 for line in lines), resource_type


def test_production_pays_for_nat_endpoints_and_more_warm_capacity(lean_bill: list[Any]) -> None:
    production = SynapseConfig.from_context(cdk.App(context={"synapse:profile": "production"}))
    bill = idle_bill(production, alarms=0, kms_keys=0, secrets=0)
    resources = {line.resource for line in bill}
    assert {
        "NAT gateways and their public IPv4",
        "Interface endpoints (ECR API, ECR Docker, Logs)",
    } <= resources
    assert "Manager's public IPv4 address" not in resources
    assert total(bill) > total(lean_bill)


def test_the_cost_ledger_prices_this_profiles_manager_and_idle_resources(
    platform: Any, raw: dict[str, dict[str, Any]], lean_bill: list[Any]
) -> None:
    env = cfn.environment(cfn.container(raw["manager"], "manager"))
    manager = next(x for x in lean_bill if x.resource.startswith("Manager task"))
    cache = sum(x.monthly_usd for x in lean_bill if x.resource.startswith("ElastiCache"))
    alarms = next(x for x in lean_bill if x.resource == "CloudWatch alarms")
    assert float(env["SYNAPSE_MANAGER_PRICE_PER_HOUR"]) == pytest.approx(manager.monthly_usd / 730, rel=1e-4)
    # Everything else on the bill but the alarms, which are built after the manager.
    other = total(lean_bill) - manager.monthly_usd - cache - alarms.monthly_usd
    assert float(env["SYNAPSE_IDLE_OTHER_PRICE_PER_MONTH"]) == pytest.approx(other, abs=0.01)
