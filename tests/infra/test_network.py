"""The network: two AZs, private workloads, endpoints, flow logs; no group open to the world."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from tests.infra import cfn

pytestmark = pytest.mark.infra


def test_vpc_spans_two_azs_with_public_subnets_only_for_nat(raw: dict[str, dict[str, Any]]) -> None:
    subnets = cfn.resources(raw["network"], "AWS::EC2::Subnet").values()
    zones = {subnet["Properties"]["AvailabilityZone"] for subnet in subnets}
    assert len(zones) == 2
    public = [s for s in subnets if s["Properties"]["MapPublicIpOnLaunch"]]
    assert public == [], "no subnet hands out public addresses"


def test_flow_logs_capture_all_traffic(templates: dict[str, Template]) -> None:
    templates["network"].has_resource_properties(
        "AWS::EC2::FlowLog", {"ResourceType": "VPC", "TrafficType": "ALL"}
    )


@pytest.mark.parametrize("service", ["ecr.api", "ecr.dkr", "logs", "secretsmanager"])
def test_interface_endpoints_keep_pulls_logs_and_secrets_inside_the_vpc(
    templates: dict[str, Template], service: str
) -> None:
    templates["network"].has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {
            "VpcEndpointType": "Interface",
            "PrivateDnsEnabled": True,
            "ServiceName": Match.string_like_regexp(r"\." + re.escape(service) + "$"),
        },
    )


def test_s3_gateway_endpoint(raw: dict[str, dict[str, Any]]) -> None:
    endpoints = cfn.resources(raw["network"], "AWS::EC2::VPCEndpoint").values()
    gateway = [e for e in endpoints if e["Properties"].get("VpcEndpointType") == "Gateway"]
    assert len(gateway) == 1
    assert "s3" in cfn.referenced_ids(gateway[0]["Properties"]["ServiceName"])


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
