"""Streaming on AWS: `/v1/*` and a job's token stream go through a STREAM integration to the front door's
streaming function (Lambda Web Adapter in response-stream mode); the rest stays buffered.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
import pytest

from stacks.config import SYNC_TIMEOUT_S, ConfigError, SynapseConfig
from stacks.front_door import STREAM_TIMEOUT
from tests.infra import cfn
from tests.infra.synthesis import REPO, Synth

pytestmark = pytest.mark.infra

STREAMED = [("/v1/{proxy+}", "ANY"), ("/results/{jobId}/stream", "GET")]
BUFFERED = [
    ("/async-infer", "POST"),
    ("/results/{jobId}", "GET"),
    ("/jobs", "GET"),
    ("/jobs/{jobId}/cancel", "POST"),
    ("/jobs/{jobId}/retry", "POST"),
    ("/healthz", "GET"),
    ("/openapi.json", "GET"),
    ("/docs", "GET"),
]
# API Gateway's ceiling for a streaming integration.
MAX_STREAM_MS = 15 * 60 * 1000


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
    return cfn.methods_by_route(raw["api"])


@pytest.fixture(scope="module")
def stream_function_id(platform: Any) -> str:
    return logical_id(platform, platform.api.front_door.stream_function)


@pytest.fixture(scope="module")
def function_id(platform: Any) -> str:
    return logical_id(platform, platform.api.front_door.function)


def test_the_routes_are_the_expected_ones(routes: dict[tuple[str, str], Mapping[str, Any]]) -> None:
    assert sorted(routes) == sorted(STREAMED + BUFFERED)


def documented_routes() -> list[tuple[str, str, bool]]:
    """docs/api.md's route table: (verb, path, needs a key) for every `VERB /path` in its first column."""
    page = (REPO / "docs" / "api.md").read_text()
    table = page[page.index("| method and path |") :].split("\n\n", 1)[0]
    found = []
    for row in table.splitlines()[2:]:
        first, meaning = row.split("|")[1:3]
        for verb, path in re.findall(r"`(GET|POST|PUT|DELETE|ANY) (/[^`?]*)", first):
            found.append((verb, path, "needs no API key" not in meaning))
    return found


def gateway_route(verb: str, path: str) -> tuple[str, str]:
    """The API Gateway method that serves a documented route: `/v1/*` is one proxy resource."""
    return ("/v1/{proxy+}", "ANY") if path.startswith("/v1/") else (path, verb)


def test_every_documented_route_is_served_with_the_documented_auth(
    routes: dict[tuple[str, str], Mapping[str, Any]], function_id: str, stream_function_id: str
) -> None:
    documented = documented_routes()
    assert len(documented) >= 10 and ("GET", "/healthz", False) in documented
    for verb, path, keyed in documented:
        method = routes[gateway_route(verb, path)]
        assert method["ApiKeyRequired"] is keyed, path
        assert method["AuthorizationType"] == ("CUSTOM" if keyed else "NONE"), path
        served_by = stream_function_id if gateway_route(verb, path) in STREAMED else function_id
        assert served_by in cfn.referenced_ids(method["Integration"]["Uri"]), path
    # Nothing is routed that docs/api.md does not document.
    assert {gateway_route(v, p) for v, p, _ in documented} == set(routes)


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


def test_the_adapter_layer_version_and_the_v1_rate_come_from_context() -> None:
    context = {
        "synapse:webAdapterLayerVersion": "26",
        "synapse:v1RateLimit": "10",
        "synapse:reserveStreamConcurrency": "true",
    }
    config = SynapseConfig.from_context(cdk.App(context=context))
    assert (config.web_adapter_layer_version, config.stream_reserved_concurrency) == (26, 250)
    assert SynapseConfig.from_context(cdk.App()).web_adapter_layer_version == 25


def test_by_default_no_front_door_function_reserves_concurrency(raw: dict[str, dict[str, Any]]) -> None:
    """A new account's reduced concurrency quota cannot hold a reservation: none is made unless asked."""
    reserving = [
        logical_id
        for template in raw.values()
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Function"
        and "ReservedConcurrentExecutions" in resource["Properties"]
    ]
    assert reserving == []


def test_asked_the_streaming_function_reserves_what_the_v1_throttle_can_hold_open(
    opted_in: Any, opted_in_raw: dict[str, dict[str, Any]]
) -> None:
    config = opted_in.platform.config
    functions = cfn.resources(opted_in_raw["api"], "AWS::Lambda::Function")
    reserved = {
        logical_id: resource["Properties"]["ReservedConcurrentExecutions"]
        for logical_id, resource in functions.items()
        if "ReservedConcurrentExecutions" in resource["Properties"]
    }
    (stream_function_id,) = reserved
    assert stream_function_id.startswith("FrontDoorStreamFunction")
    # Little's law: calls admitted at the /v1 rate, each held up to the sync wait.
    assert reserved[stream_function_id] == math.ceil(config.v1_rate_limit * SYNC_TIMEOUT_S)
    assert reserved[stream_function_id] <= config.account_concurrency - 200  # Lambda's 100 + headroom


@pytest.mark.parametrize(("name", "value"), [("webAdapterLayerVersion", 0), ("v1RateLimit", 0)])
def test_bad_streaming_values_are_refused_with_the_key_named(name: str, value: int) -> None:
    with pytest.raises(ConfigError, match=f"synapse:{name}"):
        SynapseConfig.from_context(cdk.App(context={f"synapse:{name}": value}))
