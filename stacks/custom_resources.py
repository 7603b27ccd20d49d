"""The Lambda-backed custom resources' common parts: a Python handler on Graviton whose logs are kept a
month, and the CDK provider framework in front of it (its own logs kept as long)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct


def month_of_logs(scope: Construct, construct_id: str) -> logs.LogGroup:
    """A log group kept a month and removed with its stack."""
    return logs.LogGroup(
        scope, construct_id, retention=logs.RetentionDays.ONE_MONTH, removal_policy=cdk.RemovalPolicy.DESTROY
    )


def handler_function(
    scope: Construct,
    construct_id: str,
    *,
    logs_id: str,
    description: str,
    handler: str,
    code: lambda_.Code,
    memory_size: int,
) -> lambda_.Function:
    """A custom resource's event handler: two minutes at most, which covers the retries it makes."""
    return lambda_.Function(
        scope,
        construct_id,
        description=description,
        runtime=lambda_.Runtime.PYTHON_3_14,
        architecture=lambda_.Architecture.ARM_64,
        handler=handler,
        code=code,
        memory_size=memory_size,
        timeout=cdk.Duration.minutes(2),
        log_group=month_of_logs(scope, logs_id),
    )


def provider_for(scope: Construct, function: lambda_.IFunction) -> cr.Provider:
    """The provider framework that calls `function` for the custom resource's events."""
    return cr.Provider(
        scope, "Provider", on_event_handler=function, log_group=month_of_logs(scope, "ProviderLogs")
    )
