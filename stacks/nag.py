"""cdk-nag suppressions (and acknowledged CDK warnings) in one shape, so a reviewer can grep for them."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct, IConstruct


def suppress(
    construct: IConstruct,
    rule: str,
    reason: str,
    *,
    applies_to: Sequence[str] = (),
    children: bool = True,
) -> None:
    """Silences AwsSolutions-`rule` on `construct` (and its children) for a stated reason.

    `applies_to` narrows IAM findings to the exact action or resource named, so a new wildcard
    added later still fails the check.
    """
    NagSuppressions.add_resource_suppressions(
        construct,
        [NagPackSuppression(id=f"AwsSolutions-{rule}", reason=reason, applies_to=list(applies_to) or None)],
        apply_to_children=children,
    )


def nag_resource(stack: cdk.Stack, arn: str) -> str:
    """How cdk-nag names an ARN built from references in a finding: `Ref`s become `<LogicalId>`."""
    resolved = stack.resolve(arn)
    if isinstance(resolved, str):
        return f"Resource::{resolved}"
    _, parts = resolved["Fn::Join"]
    return "Resource::" + "".join(part if isinstance(part, str) else f"<{part['Ref']}>" for part in parts)


def suppress_image_pull_wildcard(execution_role: IConstruct) -> None:
    """The one wildcard every ECS execution role has: ECR's token call takes no resource."""
    suppress(
        execution_role,
        "IAM5",
        "ecr:GetAuthorizationToken has no resource-level permissions; the layer pulls themselves "
        "are limited to the image's own repository.",
        applies_to=["Resource::*"],
    )


# AwsCustomResource runs every call of a stack in one singleton Lambda under this fixed id.
AWS_CUSTOM_RESOURCE_PROVIDER_ID = "AWS679f53fac002430cb0da5b7982bd2287"


# A Lambda's AWS-managed basic-execution policy as cdk-nag names it in an IAM4 finding.
BASIC_EXECUTION_POLICY = (
    "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"
)


def suppress_basic_execution(construct: IConstruct) -> None:
    """The AWS-managed policy every function of ours writes its logs with, and nothing more."""
    suppress(
        construct,
        "IAM4",
        "AWS-managed basic-execution policy: the minimum a Lambda needs to write its own logs.",
        applies_to=[BASIC_EXECUTION_POLICY],
    )


def suppress_custom_resource(stack: cdk.Stack) -> None:
    """The findings on CDK's own AwsCustomResource provider, which the app cannot configure."""
    provider = stack.node.try_find_child(AWS_CUSTOM_RESOURCE_PROVIDER_ID)
    if provider is None:
        raise ValueError(f"{stack.node.path} has no AwsCustomResource provider yet: call this after one")
    suppress(
        provider,
        "IAM4",
        "CDK's AwsCustomResource provider writes its logs with the AWS-managed basic-execution "
        "policy; its API permissions are the custom resource's own, scoped statements.",
        applies_to=[BASIC_EXECUTION_POLICY],
    )


def task_security_group(scope: Construct, *, vpc: ec2.IVpc, description: str) -> ec2.SecurityGroup:
    """A task's group: open egress (acknowledged below), ingress only as each peer is granted it."""
    group = ec2.SecurityGroup(
        scope, "SecurityGroup", vpc=vpc, description=description, allow_all_outbound=True
    )
    acknowledge_open_egress(group)
    return group


def acknowledge_open_egress(security_group: IConstruct) -> None:
    """Quiets CDK's note that egress rules are skipped on a group that already allows all egress."""
    cdk.Annotations.of(security_group).acknowledge_warning(
        "@aws-cdk/aws-ec2:ipv4IgnoreEgressRule",
        "Open egress is deliberate here (ECR, S3, ECS APIs through endpoints and NAT); the peer's "
        "ingress rule is what limits the path.",
    )
