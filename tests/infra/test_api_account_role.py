"""The custom resource behind API Gateway's account CloudWatch role, against botocore's Stubber: an account
with a role keeps it untouched, one without gets the stack's, and IAM's propagation delay is waited out."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from stacks.api_account_role.handler import TRIES, ensure_account_role, on_event

OURS = "arn:aws:iam::123456789012:role/SynapseApi-AccountLoggingRole"
THEIRS = "arn:aws:iam::123456789012:role/org-apigateway-logs"
PATCH = {"patchOperations": [{"op": "replace", "path": "/cloudwatchRoleArn", "value": OURS}]}


@pytest.fixture
def apigateway() -> Any:
    credentials = {"aws_access_key_id": "x", "aws_secret_access_key": "x"}
    return boto3.client("apigateway", region_name="eu-west-1", **credentials)


def test_an_account_that_has_a_role_keeps_it(apigateway: Any) -> None:
    with Stubber(apigateway) as stub:
        stub.add_response("get_account", {"cloudwatchRoleArn": THEIRS})
        # No update_account is queued: a call to it would fail the test.
        assert ensure_account_role(apigateway, OURS) == {"RoleArn": THEIRS, "SetByDeploy": "false"}
        stub.assert_no_pending_responses()


def test_a_fresh_account_gets_the_stacks_role(apigateway: Any) -> None:
    with Stubber(apigateway) as stub:
        stub.add_response("get_account", {})
        stub.add_response("update_account", {"cloudwatchRoleArn": OURS}, PATCH)
        assert ensure_account_role(apigateway, OURS) == {"RoleArn": OURS, "SetByDeploy": "true"}
        stub.assert_no_pending_responses()


def test_a_role_iam_has_not_propagated_yet_is_tried_again(apigateway: Any) -> None:
    waits: list[float] = []
    with Stubber(apigateway) as stub:
        stub.add_response("get_account", {})
        for _ in range(2):
            stub.add_client_error("update_account", "BadRequestException", "role lacks permissions", 400)
        stub.add_response("update_account", {"cloudwatchRoleArn": OURS}, PATCH)
        assert ensure_account_role(apigateway, OURS, sleep=waits.append)["SetByDeploy"] == "true"
        stub.assert_no_pending_responses()
    assert len(waits) == 2


def test_a_role_that_never_works_fails_the_deploy_after_the_last_try(apigateway: Any) -> None:
    waits: list[float] = []
    with Stubber(apigateway) as stub:
        stub.add_response("get_account", {})
        for _ in range(TRIES):
            stub.add_client_error("update_account", "BadRequestException", "role lacks permissions", 400)
        with pytest.raises(apigateway.exceptions.BadRequestException):
            ensure_account_role(apigateway, OURS, sleep=waits.append)
    assert len(waits) == TRIES - 1


def test_delete_leaves_the_account_setting_alone() -> None:
    # No client is made at all: a call would need credentials this test does not have.
    event = {"RequestType": "Delete", "PhysicalResourceId": "api-gateway-account-cloudwatch-role"}
    assert on_event(event, None) == {"PhysicalResourceId": "api-gateway-account-cloudwatch-role"}
