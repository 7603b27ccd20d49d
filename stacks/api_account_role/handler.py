"""Custom resource: sets API Gateway's account CloudWatch role only where the account has none.

The role is one setting per account and region, shared by every REST API there; a stage with
execution or access logging fails to deploy without it. An account that has one keeps it untouched.
Delete changes nothing: other APIs may log through the role by then.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

# IAM is eventually consistent: API Gateway may refuse a role created seconds ago. 12 tries, 5 s apart.
TRIES = 12
RETRY_S = 5.0


def ensure_account_role(
    client: Any, role_arn: str, *, sleep: Callable[[float], None] = time.sleep
) -> Mapping[str, str]:
    """The account's role after the call, and whether this call set it ("true") or found one ("false")."""
    current = client.get_account().get("cloudwatchRoleArn")
    if current:
        return {"RoleArn": str(current), "SetByDeploy": "false"}
    patch = [{"op": "replace", "path": "/cloudwatchRoleArn", "value": role_arn}]
    for attempt in range(1, TRIES + 1):
        try:
            client.update_account(patchOperations=patch)
            return {"RoleArn": role_arn, "SetByDeploy": "true"}
        except client.exceptions.BadRequestException:
            if attempt == TRIES:
                raise
            sleep(RETRY_S)
    raise AssertionError("unreachable")  # pragma: no cover


def on_event(event: Mapping[str, Any], _context: object) -> Mapping[str, Any]:
    """CloudFormation's Create/Update/Delete, through CDK's custom resource provider."""
    physical_id = "api-gateway-account-cloudwatch-role"
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event.get("PhysicalResourceId", physical_id)}
    import boto3

    data = ensure_account_role(boto3.client("apigateway"), event["ResourceProperties"]["RoleArn"])
    return {"PhysicalResourceId": physical_id, "Data": dict(data)}
