"""The network: two AZs; lean without NAT or interface endpoints, production with both; flow logs;
no group open to the world."""

from __future__ import annotations

import re
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template

from stacks.config import SynapseConfig
from stacks.network import NetworkStack
from tests.infra import cfn
from tests.infra.synthesis import synth_context

pytestmark = pytest.mark.infra


@pytest.fixture(scope="module")
def production() -> dict[str, Any]:
    """The network stack alone, as the production profile builds it."""
    app = cdk.App(context={**synth_context(), "synapse:profile": "production"})
    stack = NetworkStack(
        app,
        "ProductionNetwork",
        env=cdk.Environment(region="us-east-1"),
        config=(SynapseConfig.from_context(app)),
    )
    return Template.from_stack(stack).to_json()


def test_vpc_spans_two_azs_and_hands_out_no_public_address_by_default(raw: dict[str, dict[str, Any]]) -> None:
    subnets = cfn.resources(raw["network"], "AWS::EC2::Subnet").values()
    zones = {subnet["Properties"]["AvailabilityZone"] for subnet in subnets}
    assert len(zones) == 2
    public = [s for s in subnets if s["Properties"]["MapPublicIpOnLaunch"]]
    assert public == [], "addresses are asked for per workload, never by the subnet"


def test_lean_pays_for_no_nat_gateway_and_no_interface_endpoint(raw: dict[str, dict[str, Any]]) -> None:
    assert cfn.resources(raw["network"], "AWS::EC2::NatGateway") == {}
    endpoints = cfn.resources(raw["network"], "AWS::EC2::VPCEndpoint").values()
    assert [e["Properties"]["VpcEndpointType"] for e in endpoints] == ["Gateway"]


def test_production_has_a_nat_gateway_per_zone(production: dict[str, Any]) -> None:
    assert len(cfn.resources(production, "AWS::EC2::NatGateway")) == 2


@pytest.mark.parametrize("service", ["ecr.api", "ecr.dkr", "logs"])
def test_production_keeps_pulls_and_logs_off_the_nat_gateways(
    production: dict[str, Any], service: str
) -> None:
    Template.from_json(production).has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {
            "VpcEndpointType": "Interface",
            "PrivateDnsEnabled": True,
            "ServiceName": Match.string_like_regexp(r"\." + re.escape(service) + "$"),
        },
    )


def test_flow_logs_capture_all_traffic(templates: dict[str, Template]) -> None:
    templates["network"].has_resource_properties(
        "AWS::EC2::FlowLog", {"ResourceType": "VPC", "TrafficType": "ALL"}
    )


def s3_gateway_route_tables(template: dict[str, Any]) -> str:
    endpoints = cfn.resources(template, "AWS::EC2::VPCEndpoint").values()
    gateway = [e for e in endpoints if e["Properties"].get("VpcEndpointType") == "Gateway"]
    assert len(gateway) == 1
    assert "s3" in cfn.referenced_ids(gateway[0]["Properties"]["ServiceName"])
    return cfn.referenced_ids(gateway[0]["Properties"]["RouteTableIds"])


def test_s3_gateway_endpoint_serves_the_workloads_and_the_isolated_tier(
    raw: dict[str, dict[str, Any]],
) -> None:
    route_tables = s3_gateway_route_tables(raw["network"])
    # Lean workloads run in the public subnets: their route tables carry the endpoint; the isolated
    # tier's do too, for the front door's files bucket (it has no other way out).
    assert "publicSubnet" in route_tables
    assert "isolatedSubnet" in route_tables


def test_production_s3_gateway_endpoint_serves_the_private_and_the_isolated_tier(
    production: dict[str, Any],
) -> None:
    route_tables = s3_gateway_route_tables(production)
    assert "privateSubnet" in route_tables
    assert "isolatedSubnet" in route_tables
    assert "publicSubnet" not in route_tables


def test_the_cache_and_the_front_door_live_in_subnets_with_no_route_out_but_the_s3_endpoint(
    raw: dict[str, dict[str, Any]],
) -> None:
    cache = cfn.only(raw["data"], "AWS::ElastiCache::ServerlessCache")
    functions = [
        f["Properties"]
        for f in cfn.resources(raw["api"], "AWS::Lambda::Function").values()
        if "VpcConfig" in f["Properties"]
    ]
    assert len(functions) == 2
    for subnets in [cache["SubnetIds"], *(f["VpcConfig"]["SubnetIds"] for f in functions)]:
        assert "isolatedSubnet" in cfn.referenced_ids(subnets)
        assert "public" not in cfn.referenced_ids(subnets)
    routes = cfn.resources(raw["network"], "AWS::EC2::Route")
    assert not any("isolated" in logical_id for logical_id in routes)


def test_no_security_group_is_open_to_the_world(raw: dict[str, dict[str, Any]]) -> None:
    # API Gateway is the only public endpoint, and it has no security group: nothing may be open.
    open_rules = [
        rule
        for stack, template in raw.items()
        for rule in cfn.ingress_rules(stack, template)
        if rule.open_to_world
    ]
    assert open_rules == []


def test_every_ingress_rule_names_a_peer_group_or_the_vpc(
    platform: Any, raw: dict[str, dict[str, Any]]
) -> None:
    vpc_cidr = platform.config.vpc_cidr
    for stack, template in raw.items():
        for rule in cfn.ingress_rules(stack, template):
            assert rule.source == vpc_cidr or rule.source.startswith("{"), rule
