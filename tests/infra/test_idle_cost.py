"""The idle bill: the lean profile stays within its budget, and nothing always-on goes unpriced."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import aws_cdk as cdk
import pytest

from contract.catalog import ModelKind
from stacks.config import SynapseConfig
from stacks.idle_cost import (
    AMG_EDITOR_MONTH,
    AMP_SERIES_PER_MODEL,
    FREE_AT_IDLE,
    LEAN_BUDGET,
    PRICED_TYPES,
    idle_bill,
    table,
    total,
)
from tests.infra import cfn
from tests.infra.conftest import STACK_NAMES
from tests.infra.synthesis import REPO, synthesize

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
    return bill_of(platform, raw)


def bill_of(platform: Any, raw: dict[str, dict[str, Any]]) -> list[Any]:
    return idle_bill(
        platform.config,
        alarms=count(raw, "AWS::CloudWatch::Alarm"),
        kms_keys=count(raw, "AWS::KMS::Key"),
        secrets=count(raw, "AWS::SecretsManager::Secret"),
        capacity_providers=count(raw, "AWS::ECS::CapacityProvider"),
    )


def test_the_deploy_page_shows_the_lean_bill_line_by_line(lean_bill: list[Any]) -> None:
    """docs/deploy.md's idle table is `python -m stacks.idle_cost lean`, row for row."""
    page = (REPO / "docs" / "deploy.md").read_text()
    section = page[page.index("## Idle cost") :]
    rows = re.findall(r"^\| (?!resource \||---).*\|$", section.split("\n\n## ")[0], re.MULTILINE)
    assert rows == table(lean_bill)


def test_the_deploy_page_shows_the_production_bill(
    tmp_path_factory: pytest.TempPathFactory, lean_bill: list[Any]
) -> None:
    """Its paragraph's figures are lines of the synthesized production bill (or the lean one it compares
    them with), and its total is that bill's: the page states no idle figure of its own."""
    production = synthesize(tmp_path_factory.mktemp("cdk.out.production"), {"synapse:profile": "production"})
    raw = {name: production.raw(getattr(production.platform, name)) for name in STACK_NAMES}
    bill = bill_of(production.platform, raw)
    page = (REPO / "docs" / "deploy.md").read_text()
    paragraph = page[page.index("`production` (`python -m stacks.idle_cost production`)") :].split("\n\n")[0]
    *parts, bold_total = re.findall(r"\$(\d+\.\d\d)", paragraph)
    assert bold_total == f"{total(bill):.2f}" and f"**${bold_total}**" in paragraph
    assert set(parts) <= {f"{line.monthly_usd:.2f}" for line in [*bill, *lean_bill]}


def test_ecs_managed_scalings_own_alarms_are_on_the_bill(lean_bill: list[Any], raw: dict[str, Any]) -> None:
    alarms = next(line for line in lean_bill if line.resource == "CloudWatch alarms")
    in_templates = count(raw, "AWS::CloudWatch::Alarm")
    providers = count(raw, "AWS::ECS::CapacityProvider")
    assert providers == 2
    assert alarms.monthly_usd == pytest.approx((in_templates + 2 * providers) * 0.10)


def test_managed_grafana_bills_an_editor_licence_where_it_is_on(
    opted_in: Any, opted_in_raw: dict[str, dict[str, Any]], lean_bill: list[Any]
) -> None:
    with_grafana = bill_of(opted_in.platform, opted_in_raw)
    (licence,) = [line for line in with_grafana if line.resource == "Amazon Managed Grafana"]
    assert licence.monthly_usd == AMG_EDITOR_MONTH
    assert not [line for line in lean_bill if line.resource == "Amazon Managed Grafana"]
    for resource_type in resource_types(opted_in_raw) & PRICED_TYPES.keys():
        assert any(line.resource.startswith(PRICED_TYPES[resource_type]) for line in with_grafana), (
            resource_type
        )


@pytest.mark.parametrize("kind", list(ModelKind))
def test_the_series_a_served_model_adds_are_counted_on_the_managers_registry(kind: ModelKind) -> None:
    """Start from the manager's registry with nothing observed, then do for one model what the manager does:
    the sampler's gauges for a served model, then its first job through the functions and families the
    dispatcher records it with. The difference is what the bill charges for a model of that kind."""
    generative = kind is ModelKind.GENERATIVE
    probe = f"""
from prometheus_client import REGISTRY, generate_latest
import manager.metrics as m
from contract.jobs import JobStatus, Outcome
def count():
    lines = generate_latest(REGISTRY).decode().splitlines()
    return sum(1 for line in lines if line and not line.startswith('#'))
before = count()
m.set_queue_depth('a-model', streams={{'high': 0, 'normal': 0}}, buffer=0)
m.publish(m.ManagerSnapshot(submitted={{'a-model': 0}}, cancelled={{'a-model': 0}}))
done = Outcome('j', JobStatus.COMPLETED, started_ms=5, completed_ms=9, batch_size=1,
               dimensions={0 if generative else 4} if {kind is ModelKind.EMBEDDING} else 0)
m.record_outcomes('a-model', [done], {{'j': 1}}, end_to_end={not generative})
if {generative}:
    m.SEQUENCES.labels('a-model', 'running').set(0)
    m.SEQUENCES.labels('a-model', 'waiting').set(0)
    m.TIME_TO_FIRST_TOKEN.labels('a-model').observe(0.1)
    m.INTER_TOKEN_LATENCY.labels('a-model').observe(0.01)
    m.OUTPUT_TOKENS.labels('a-model').inc()
else:
    m.record_batch('a-model', 1, 0.05)
print(count() - before)
"""
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    assert int(result.stdout) == AMP_SERIES_PER_MODEL[kind]


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
