"""API Gateway: keys on every route, throttled per key, validated, logged; the Lambda in the VPC."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from aws_cdk.assertions import Match, Template

from frontdoor.schemas import SubmitRequest
from tests.infra import cfn

pytestmark = pytest.mark.infra


def keyed_methods(raw: dict[str, dict[str, Any]]) -> list[Any]:
    """Every method but the one that must answer without a key, `GET /healthz`."""
    return [m for route, m in cfn.methods_by_route(raw["api"]).items() if route != ("/healthz", "GET")]


def test_every_method_but_healthz_requires_an_api_key(raw: dict[str, dict[str, Any]]) -> None:
    methods = keyed_methods(raw)
    assert len(methods) >= 3
    assert all(method["ApiKeyRequired"] is True for method in methods)


def test_a_bearer_token_counts_as_the_api_key_on_every_method(raw: dict[str, dict[str, Any]]) -> None:
    """OpenAI clients send `Authorization: Bearer`: the authorizer hands it to the usage plan."""
    (api,) = cfn.resources(raw["api"], "AWS::ApiGateway::RestApi").values()
    assert api["Properties"]["ApiKeySourceType"] == "AUTHORIZER"
    (authorizer,) = cfn.resources(raw["api"], "AWS::ApiGateway::Authorizer").values()
    assert authorizer["Properties"]["Type"] == "REQUEST"
    assert authorizer["Properties"].get("AuthorizerResultTtlInSeconds", 0) == 0
    functions = cfn.resources(raw["api"], "AWS::Lambda::Function").values()
    assert "frontdoor.authorizer.handler" in {f["Properties"]["Handler"] for f in functions}
    assert all(method["AuthorizationType"] == "CUSTOM" for method in keyed_methods(raw))


def test_healthz_needs_no_key_and_no_authorizer(raw: dict[str, dict[str, Any]]) -> None:
    health = cfn.methods_by_route(raw["api"])[("/healthz", "GET")]
    assert health["ApiKeyRequired"] is False
    assert health["AuthorizationType"] == "NONE"
    assert "AuthorizerId" not in health


def test_v1_has_a_throttle_of_its_own_that_the_reservation_is_sized_from(
    platform: Any, raw: dict[str, dict[str, Any]]
) -> None:
    stage = cfn.only(raw["api"], "AWS::ApiGateway::Stage")
    (v1,) = (s for s in stage["MethodSettings"] if s["ResourcePath"] == "/~1v1~1{proxy+}")
    rate = platform.config.v1_rate_limit
    assert (v1["HttpMethod"], v1["ThrottlingRateLimit"], v1["ThrottlingBurstLimit"]) == ("*", rate, rate)


def test_a_fresh_account_gets_api_gateways_logging_role_before_the_logging_stage(
    raw: dict[str, dict[str, Any]],
) -> None:
    """No flag to know about: the stage that logs waits for a custom resource that sets the account's
    CloudWatch role only where there is none; AWS::ApiGateway::Account would overwrite one."""
    template = raw["api"]
    assert cfn.resources(template, "AWS::ApiGateway::Account") == {}
    ((setting_id, setting),) = cfn.resources(template, "Custom::SynapseApiGatewayAccountRole").items()
    roles = cfn.resources(template, "AWS::IAM::Role")
    (role_id,) = [
        logical_id
        for logical_id, role in roles.items()
        if "apigateway.amazonaws.com" in str(role["Properties"]["AssumeRolePolicyDocument"])
    ]
    assert setting["Properties"]["RoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
    assert roles[role_id]["DeletionPolicy"] == "Retain"  # the account setting may point at it
    (stage_id, stage) = next(iter(cfn.resources(template, "AWS::ApiGateway::Stage").items()))
    assert "AccessLogSetting" in stage["Properties"]
    assert setting_id in stage.get("DependsOn", []), f"{stage_id} may start before the role is set"


def test_the_role_setter_may_touch_only_the_account_setting_and_pass_only_its_role(
    raw: dict[str, dict[str, Any]],
) -> None:
    statements = [
        statement
        for statement in cfn.policy_statements("api", raw["api"])
        if any(action.startswith(("apigateway:", "iam:PassRole")) for action in statement.actions)
    ]
    by_action = {action: statement for statement in statements for action in statement.actions}
    assert set(by_action) == {"apigateway:GET", "apigateway:PATCH", "iam:PassRole"}
    assert by_action["apigateway:PATCH"].resources == by_action["apigateway:GET"].resources
    assert "::/account" in by_action["apigateway:PATCH"].resources[0]
    (role_id,) = [
        logical_id
        for logical_id, role in cfn.resources(raw["api"], "AWS::IAM::Role").items()
        if "apigateway.amazonaws.com" in str(role["Properties"]["AssumeRolePolicyDocument"])
    ]
    assert by_action["iam:PassRole"].resources == (cfn.referenced_ids({"Fn::GetAtt": [role_id, "Arn"]}),)


def test_usage_plan_throttles_each_key(platform: Any, templates: dict[str, Template]) -> None:
    config = platform.config
    api = templates["api"]
    api.has_resource_properties(
        "AWS::ApiGateway::UsagePlan",
        {"Throttle": {"RateLimit": config.api_rate_limit, "BurstLimit": config.api_burst_limit}},
    )
    api.resource_count_is("AWS::ApiGateway::ApiKey", 1)
    api.resource_count_is("AWS::ApiGateway::UsagePlanKey", 1)


def test_stage_writes_access_logs_and_execution_errors(templates: dict[str, Template]) -> None:
    templates["api"].has_resource_properties(
        "AWS::ApiGateway::Stage",
        {
            "AccessLogSetting": Match.object_like({"DestinationArn": Match.any_value()}),
            "MethodSettings": Match.array_with(
                [Match.object_like({"HttpMethod": "*", "ResourcePath": "/*", "LoggingLevel": "ERROR"})]
            ),
        },
    )


def test_submit_body_is_validated_at_the_gateway(templates: dict[str, Template]) -> None:
    templates["api"].has_resource_properties(
        "AWS::ApiGateway::Method",
        {
            "HttpMethod": "POST",
            "RequestValidatorId": Match.any_value(),
            "RequestModels": {"application/json": Match.any_value()},
        },
    )


def gateway_schema(raw: dict[str, dict[str, Any]]) -> dict[str, Any]:
    model = cfn.only(raw["api"], "AWS::ApiGateway::Model")
    schema: dict[str, Any] = model["Schema"]
    return schema


@pytest.mark.parametrize(
    "body",
    [
        {"model": "gpu-sim", "prompt": "hello"},
        {"model": "tiny-gpt2", "prompt": "x", "parameters": {"max_tokens": 8}, "timeoutMs": 5000},
        {"model": "gpu-sim", "prompt": "hi", "timeoutMs": None},
        {
            "model": "gpu-sim",
            "prompt": "hi",
            "priority": "batch",
            "callback": "https://hooks.example.com/synapse",
            "ttl": 3600,
        },
    ],
)
def test_gateway_accepts_every_body_the_handler_accepts(
    raw: dict[str, dict[str, Any]], body: dict[str, Any]
) -> None:
    SubmitRequest.model_validate(body)  # the handler's own contract
    jsonschema.Draft4Validator(gateway_schema(raw)).validate(body)


@pytest.mark.parametrize(
    "body", [{"prompt": "no model"}, {"model": "gpu-sim"}, {"model": "", "prompt": "x"}, []]
)
def test_gateway_turns_away_what_can_never_be_a_job(raw: dict[str, dict[str, Any]], body: Any) -> None:
    assert not jsonschema.Draft4Validator(gateway_schema(raw)).is_valid(body)


def test_front_door_lambda_runs_in_the_vpc_with_the_cache_settings_and_no_secret(
    platform: Any, raw: dict[str, dict[str, Any]]
) -> None:
    (function,) = (
        f["Properties"]
        for f in cfn.resources(raw["api"], "AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == "frontdoor.handler.lambda_handler"
    )
    assert function["VpcConfig"]["SubnetIds"]
    variables = function["Environment"]["Variables"]
    assert cfn.referenced_ids(variables["SYNAPSE_REDIS_URL"]).startswith('{"Fn::Join": ["", ["rediss://')
    for name, value in platform.data.cache.environment.items():
        if name != "SYNAPSE_REDIS_URL":
            assert variables[name] == value, name
    assert not any("SECRET" in name or "TOKEN" in name for name in variables)


def test_front_door_may_only_connect_to_the_cache_and_use_the_files_bucket(
    raw: dict[str, dict[str, Any]],
) -> None:
    statements = list(cfn.policy_statements("api", raw["api"]))
    lambda_statements = [s for s in statements if s.policy.startswith("FrontDoorFunction")]
    # The files bucket's statements are checked in detail in tests/infra/test_files_bucket.py.
    assert sorted(s.actions for s in lambda_statements) == [
        ("elasticache:Connect",),
        ("s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject", "s3:PutObject"),
        ("s3:ListBucket",),
    ]
