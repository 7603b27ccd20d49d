"""Small readers over synthesized CloudFormation templates (plain dicts), for checks that span stacks."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

Resources = Mapping[str, Mapping[str, Any]]


def resources(template: Mapping[str, Any], resource_type: str) -> dict[str, Mapping[str, Any]]:
    return {
        logical_id: resource
        for logical_id, resource in template.get("Resources", {}).items()
        if resource["Type"] == resource_type
    }


def only(template: Mapping[str, Any], resource_type: str) -> Mapping[str, Any]:
    """The properties of the one resource of this type in the template."""
    found = resources(template, resource_type)
    assert len(found) == 1, f"expected one {resource_type}, found {sorted(found)}"
    properties: Mapping[str, Any] = next(iter(found.values())).get("Properties", {})
    return properties


def referenced_ids(value: Any) -> str:
    """Everything a value points at (logical ids, cross-stack output names), as searchable text."""
    return json.dumps(value, sort_keys=True)


@dataclass(frozen=True)
class Ingress:
    stack: str
    target: str  # what the rule opens (the group's reference, as text)
    source: str  # a CIDR, or the source group's reference as text
    from_port: int | None
    to_port: int | None

    @property
    def open_to_world(self) -> bool:
        return self.source in {"0.0.0.0/0", "::/0"}


def ingress_rules(stack: str, template: Mapping[str, Any]) -> Iterator[Ingress]:
    """Standalone ingress rules and the ones written inline in security groups."""
    for logical_id, resource in template.get("Resources", {}).items():
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::EC2::SecurityGroupIngress":
            yield _ingress(stack, referenced_ids(properties.get("GroupId")), properties)
        elif resource["Type"] == "AWS::EC2::SecurityGroup":
            for rule in properties.get("SecurityGroupIngress", []):
                yield _ingress(stack, logical_id, rule)


def _ingress(stack: str, target: str, rule: Mapping[str, Any]) -> Ingress:
    source = rule.get("CidrIp") or rule.get("CidrIpv6") or referenced_ids(rule.get("SourceSecurityGroupId"))
    return Ingress(stack, target, str(source), rule.get("FromPort"), rule.get("ToPort"))


@dataclass(frozen=True)
class Statement:
    stack: str
    policy: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    condition: str = ""  # the statement's Condition block as JSON, "" where it has none


def policy_statements(stack: str, template: Mapping[str, Any]) -> Iterator[Statement]:
    for logical_id, resource in resources(template, "AWS::IAM::Policy").items():
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"]
            targets = statement.get("Resource", [])
            yield Statement(
                stack,
                logical_id,
                tuple([actions] if isinstance(actions, str) else actions),
                tuple(referenced_ids(t) if not isinstance(t, str) else t for t in _as_list(targets)),
                json.dumps(statement["Condition"], sort_keys=True) if "Condition" in statement else "",
            )


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def container(template: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """The container definition called `name` in any task definition of the template."""
    for resource in resources(template, "AWS::ECS::TaskDefinition").values():
        for definition in resource["Properties"]["ContainerDefinitions"]:
            if definition["Name"] == name:
                found: Mapping[str, Any] = definition
                return found
    raise AssertionError(f"no container named {name!r}")


def environment(definition: Mapping[str, Any]) -> dict[str, Any]:
    return {item["Name"]: item["Value"] for item in definition.get("Environment", [])}


def methods_by_route(template: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """Every method's properties by (full resource path, HTTP verb), paths rebuilt from the parents."""
    parts = {
        logical_id: (resource["Properties"]["PathPart"], resource["Properties"]["ParentId"])
        for logical_id, resource in resources(template, "AWS::ApiGateway::Resource").items()
    }

    def path(reference: Mapping[str, Any]) -> str:
        logical_id = reference.get("Ref")
        if logical_id not in parts:  # the API's root resource (Fn::GetAtt RootResourceId)
            return ""
        part, parent = parts[logical_id]
        return f"{path(parent)}/{part}"

    return {
        (path(method["Properties"]["ResourceId"]), method["Properties"]["HttpMethod"]): method["Properties"]
        for method in resources(template, "AWS::ApiGateway::Method").values()
    }
