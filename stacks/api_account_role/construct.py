"""API Gateway's account CloudWatch role, created with the stack and set only where the account has none.

`AWS::ApiGateway::Account` would overwrite an account's existing role (one setting per account and
region, shared by every REST API there), and without any role a stage with access or execution logging
fails to create: so a custom resource reads `GetAccount` and calls `UpdateAccount` only when the account
has no role (https://docs.aws.amazon.com/apigateway/latest/developerguide/set-up-logging.html).
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from stacks.custom_resources import handler_function, provider_for
from stacks.nag import BASIC_EXECUTION_POLICY, suppress

HANDLER = Path(__file__).with_name("handler.py")
PUSH_POLICY = "service-role/AmazonAPIGatewayPushToCloudWatchLogs"


class AccountLoggingRole(Construct):
    """`resource` must exist before any stage that logs: depend on it."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("apigateway.amazonaws.com"),
            description="API Gateway's account-level CloudWatch Logs role, where the account had none",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(PUSH_POLICY)],
        )
        # Kept when the stack goes: the account setting may point at it, and other APIs may log through it.
        self.role.apply_removal_policy(cdk.RemovalPolicy.RETAIN)
        function = handler_function(
            self,
            "Function",
            logs_id="Logs",
            description="Synapse: sets API Gateway's account CloudWatch role if the account has none",
            handler="index.on_event",
            code=lambda_.Code.from_inline(HANDLER.read_text()),
            memory_size=128,
        )
        account = stack.format_arn(
            service="apigateway", account="", resource="/account", arn_format=cdk.ArnFormat.NO_RESOURCE_NAME
        )
        function.add_to_role_policy(
            iam.PolicyStatement(actions=["apigateway:GET", "apigateway:PATCH"], resources=[account])
        )
        function.add_to_role_policy(
            iam.PolicyStatement(actions=["iam:PassRole"], resources=[self.role.role_arn])
        )
        provider = provider_for(self, function)
        self.resource = cdk.CustomResource(
            self,
            "Setting",
            service_token=provider.service_token,
            resource_type="Custom::SynapseApiGatewayAccountRole",
            properties={"RoleArn": self.role.role_arn},
        )
        self.account_role_arn = self.resource.get_att_string("RoleArn")
        suppress(
            self,
            "IAM4",
            "AWS-managed policies made for these two roles: API Gateway's push to CloudWatch Logs "
            "(AmazonAPIGatewayPushToCloudWatchLogs) and a Lambda's own logs (basic execution).",
            applies_to=[
                f"Policy::arn:<AWS::Partition>:iam::aws:policy/{PUSH_POLICY}",
                BASIC_EXECUTION_POLICY,
            ],
        )
        function_id = stack.resolve(stack.get_logical_id(function.node.default_child))  # type: ignore[arg-type]
        suppress(
            provider,
            "IAM5",
            "The custom resource framework may invoke any version of the setting function (<arn>:*), "
            "that one function only.",
            applies_to=[f"Resource::<{function_id}.Arn>:*"],
        )
