"""Streaming on AWS: `/v1/*` and a job's token stream go through a STREAM integration to the front door's
streaming function (Lambda Web Adapter in response-stream mode); the rest stays buffered.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
import pytest

from stacks.config import ConfigError, SynapseConfig
from stacks.front_door import STREAM_TIMEOUT
from tests.infra import cfn
from tests.infra.synthesis import Synth

pytestmark = pytest.mark.infra

STREAMED = [("/v1/{proxy+}", "ANY"), ("/results/{jobId}/stream", "GET")]
BUFFERED = [("/async-infer", "POST"), ("/results/{jobId}", "GET")]
# API Gateway's ceiling for a streaming integration.
MAX_STREAM_MS = 15 * 60 * 1000


def methods_by_route(template: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """Every method's properties by (full resource path, HTTP verb), paths rebuilt from the parents."""
    parts = {
        logical_id: (resource["Properties"]["PathPart"], resource["Properties"]["ParentId"])
        for logical_id, resource in cfn.resources(template, "AWS::ApiGateway::Resource").items()
    }

    def path(reference: Mapping[str, Any]) -> str:
        logical_id = reference.get("Ref")
        if logical_id not in parts:  # the API's root resource (Fn::GetAtt RootResourceId)
            return ""
        part, parent = parts[logical_id]
        return f"{path(parent)}/{part}"

    return {
        (path(method["Properties"]["ResourceId"]), method["Properties"]["HttpMethod"]): method["Properties"]
        for method in cfn.resources(template, "AWS::ApiGateway::Method").values()
    }


def logical_id(platform: Any, function: Any) -> str:
    stack = platform.api
    found: str = stack.resolve(stack.get_logical_id(function.node.default_child))
    return found


def function_properties(raw: dict[str, dict[str, Any]], function_id: str) -> Mapping[str, Any]:
    properties: Mapping[str, Any] = raw["api"]["Resources"][function_id]["Properties"]
    return properties


def invocation_uri(region: str, function_id: str, *, streaming: bool) -> str:
    """A Lambda proxy integration's URI, as text: InvokeWithResponseStream's path when streaming."""
    api_path = "2021-11-15" if streaming else "2015-03-31"
    action = "response-streaming-invocations" if streaming else "invocations"
    prefix = f"arn:aws:apigateway:{region}:lambda:path/{api_path}/functions/"
    return cfn.referenced_ids(
        {"Fn::Join": ["", [prefix, {"Fn::GetAtt": [function_id, "Arn"]}, f"/{action}"]]}
    )


@pytest.fixture(scope="module")
def routes(raw: dict[str, dict[str, Any]]) -> dict[tuple[str, str], Mapping[str, Any]]:
    return methods_by_route(raw["api"])


@pytest.fixture(scope="module")
def stream_function_id(platform: Any) -> str:
    return logical_id(platform, platform.api.front_door.stream_function)


@pytest.fixture(scope="module")
def function_id(platform: Any) -> str:
    return logical_id(platform, platform.api.front_door.function)


def test_the_routes_are_the_four_expected(routes: dict[tuple[str, str], Mapping[str, Any]]) -> None:
    assert sorted(routes) == sorted(STREAMED + BUFFERED)


@pytest.mark.parametrize("route", STREAMED)
def test_streaming_routes_stream_from_the_streaming_function(
    platform: Any,
    raw: dict[str, dict[str, Any]],
    routes: dict[tuple[str, str], Mapping[str, Any]],
    stream_function_id: str,
    route: tuple[str, str],
) -> None:
    integration = routes[route]["Integration"]
    assert integration["Type"] == "AWS_PROXY"
    assert integration["ResponseTransferMode"] == "STREAM"
    expected = invocation_uri(platform.config.region, stream_function_id, streaming=True)
    assert cfn.referenced_ids(integration["Uri"]) == expected
    # The gateway holds the stream as long as the function may write to it, within its ceiling.
    timeout_s = function_properties(raw, stream_function_id)["Timeout"]
    assert integration["TimeoutInMillis"] == timeout_s * 1000 <= MAX_STREAM_MS


@pytest.mark.parametrize("route", BUFFERED)
def test_submission_and_result_polling_stay_buffered_on_the_plain_function(
    platform: Any, routes: dict[tuple[str, str], Mapping[str, Any]], function_id: str, route: tuple[str, str]
) -> None:
    integration = routes[route]["Integration"]
    assert integration.get("ResponseTransferMode", "BUFFERED") == "BUFFERED"
    assert "TimeoutInMillis" not in integration  # the buffered default, 29 s
    expected = invocation_uri(platform.config.region, function_id, streaming=False)
    assert cfn.referenced_ids(integration["Uri"]) == expected


@pytest.mark.parametrize("route", STREAMED)
def test_streaming_routes_need_the_api_key_like_every_other_route(
    routes: dict[tuple[str, str], Mapping[str, Any]], route: tuple[str, str]
) -> None:
    method = routes[route]
    submit = routes[("/async-infer", "POST")]
    assert method["ApiKeyRequired"] is True
    # The same request authorizer hands the key (x-api-key or a bearer token) to the usage plan.
    assert method["AuthorizationType"] == "CUSTOM"
    assert method["AuthorizerId"] == submit["AuthorizerId"]


def test_the_job_stream_route_takes_the_job_id_and_last_event_id(
    routes: dict[tuple[str, str], Mapping[str, Any]],
) -> None:
    parameters = routes[("/results/{jobId}/stream", "GET")]["RequestParameters"]
    assert parameters == {"method.request.path.jobId": True, "method.request.header.Last-Event-ID": False}


def test_the_streaming_function_runs_the_web_adapter_in_response_stream_mode(
    platform: Any, raw: dict[str, dict[str, Any]], stream_function_id: str
) -> None:
    function = function_properties(raw, stream_function_id)
    version = platform.config.web_adapter_layer_version
    assert function["Layers"] == [
        f"arn:aws:lambda:{platform.config.region}:753240598075:layer:LambdaAdapterLayerX86:{version}"
    ]
    assert function["Handler"] == "frontdoor/run.sh"
    variables = function["Environment"]["Variables"]
    assert variables["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/bootstrap"
    assert variables["AWS_LWA_INVOKE_MODE"] == "response_stream"
    assert variables["AWS_LWA_PORT"] == "8080"
    assert variables["AWS_LWA_READINESS_CHECK_PATH"] == "/healthz"
    assert function["Timeout"] == STREAM_TIMEOUT.to_seconds()


def test_the_streaming_function_is_the_front_door_with_its_settings_network_and_role(
    raw: dict[str, dict[str, Any]], function_id: str, stream_function_id: str
) -> None:
    plain, streaming = function_properties(raw, function_id), function_properties(raw, stream_function_id)
    plain_variables = plain["Environment"]["Variables"]
    assert plain_variables.items() <= streaming["Environment"]["Variables"].items()
    assert not any(name.startswith("AWS_LWA_") for name in plain_variables)
    # One security group (so one ElastiCache ingress rule) and one role (so one secret grant).
    for shared in ("VpcConfig", "Role", "Runtime", "Code", "MemorySize"):
        assert streaming[shared] == plain[shared], shared


def test_api_gateway_may_invoke_the_streaming_function_from_the_streaming_routes_only(
    raw: dict[str, dict[str, Any]], stream_function_id: str
) -> None:
    # The source ARN ends in the stage's "/<verb>/<path>", with `*` for the path parameters.
    sources = sorted(
        permission["Properties"]["SourceArn"]["Fn::Join"][1][-1]
        for permission in cfn.resources(raw["api"], "AWS::Lambda::Permission").values()
        if stream_function_id in cfn.referenced_ids(permission["Properties"]["FunctionName"])
    )
    assert sources == ["/*/v1/*", "/GET/results/*/stream"]


def test_run_sh_ships_executable_in_the_asset(
    synth: Synth, raw: dict[str, dict[str, Any]], stream_function_id: str
) -> None:
    """The adapter execs the handler file itself: the asset (zipped with file modes) must carry its x bit."""
    asset_hash = function_properties(raw, stream_function_id)["Code"]["S3Key"].removesuffix(".zip")
    manifest = json.loads((synth.outdir / f"{synth.platform.api.artifact_id}.assets.json").read_text())
    script = synth.outdir / manifest["files"][asset_hash]["source"]["path"] / "frontdoor" / "run.sh"
    assert os.access(script, os.X_OK), f"{script} is not executable"
    text = script.read_text()
    assert text.startswith("#!/bin/bash\n")
    assert "exec python3 -m frontdoor.http_server" in text


def test_the_adapter_layer_version_and_the_reservation_come_from_context() -> None:
    context = {"synapse:webAdapterLayerVersion": "26", "synapse:streamReservedConcurrency": "50"}
    config = SynapseConfig.from_context(cdk.App(context=context))
    assert (config.web_adapter_layer_version, config.stream_reserved_concurrency) == (26, 50)
    defaults = SynapseConfig.from_context(cdk.App())
    assert (defaults.web_adapter_layer_version, defaults.stream_reserved_concurrency) == (25, 0)


def test_the_streaming_function_reserves_no_concurrency_by_default(
    raw: dict[str, dict[str, Any]], stream_function_id: str
) -> None:
    assert "ReservedConcurrentExecutions" not in function_properties(raw, stream_function_id)


@pytest.mark.parametrize(
    ("name", "value"), [("webAdapterLayerVersion", 0), ("streamReservedConcurrency", -1)]
)
def test_bad_streaming_values_are_refused_with_the_key_named(name: str, value: int) -> None:
    with pytest.raises(ConfigError, match=f"synapse:{name}"):
        SynapseConfig.from_context(cdk.App(context={f"synapse:{name}": value}))
