"""The OpenAPI spec is generated from the routes; the copy in docs/ must be the generated one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from frontdoor.handler import build_app, lambda_handler
from frontdoor.openapi import openapi_spec, spec_text
from tests.processes import REPO
from tests.unit.frontdoor.test_frontdoor_rejections import event

COMMITTED = REPO / "docs" / "openapi.json"


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return openapi_spec(build_app())


def test_the_committed_spec_is_current():
    assert COMMITTED.read_text(encoding="utf-8") == spec_text(build_app()), (
        "docs/openapi.json is stale: run `python -m frontdoor.openapi_file docs/openapi.json`"
    )


def test_every_route_is_documented(spec: dict[str, Any]):
    operations = {(method.upper(), path) for path, ops in spec["paths"].items() for method in ops}
    assert operations == {
        ("GET", "/healthz"),
        ("POST", "/async-infer"),
        ("GET", "/results/{job_id}"),
        ("GET", "/results/{job_id}/stream"),
        ("GET", "/jobs"),
        ("POST", "/jobs/{job_id}/cancel"),
        ("POST", "/jobs/{job_id}/retry"),
        ("GET", "/v1/models"),
        ("GET", "/v1/models/{model_id}"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/embeddings"),
        ("POST", "/v1/responses"),
        ("GET", "/v1/responses/{response_id}"),
        ("DELETE", "/v1/responses/{response_id}"),
        ("POST", "/v1/responses/{response_id}/cancel"),
        ("GET", "/v1/responses/{response_id}/input_items"),
        ("POST", "/v1/files"),
        ("GET", "/v1/files"),
        ("GET", "/v1/files/{file_id}"),
        ("DELETE", "/v1/files/{file_id}"),
        ("GET", "/v1/files/{file_id}/content"),
        ("POST", "/v1/batches"),
        ("GET", "/v1/batches"),
        ("GET", "/v1/batches/{batch_id}"),
        ("POST", "/v1/batches/{batch_id}/cancel"),
        ("POST", "/v1/uploads"),
        ("POST", "/v1/uploads/{upload_id}/parts"),
        ("POST", "/v1/uploads/{upload_id}/complete"),
        ("POST", "/v1/uploads/{upload_id}/cancel"),
    }


def test_every_route_but_healthz_needs_a_key_and_says_so(spec: dict[str, Any]):
    for path, ops in spec["paths"].items():
        for operation in ops.values():
            if path == "/healthz":
                assert "security" not in operation
                continue
            assert {"apiKey": []} in operation["security"], path
            assert {"401", "403"} <= operation["responses"].keys(), path


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs(item)


def test_every_reference_resolves_and_the_framework_422_is_gone(spec: dict[str, Any]):
    schemas = spec["components"]["schemas"]
    for ref in refs(spec):
        assert ref.removeprefix("#/components/schemas/") in schemas, ref
    assert "HTTPValidationError" not in json.dumps(spec)


def test_the_v1_routes_document_openai_errors_and_the_event_stream(spec: dict[str, Any]):
    completions = spec["paths"]["/v1/completions"]["post"]["responses"]
    assert completions["200"]["content"].keys() == {"application/json", "text/event-stream"}
    event = completions["200"]["content"]["text/event-stream"]["schema"]
    assert event["properties"]["data"]["anyOf"][0] == {"const": "[DONE]"}
    assert completions["504"]["content"]["application/json"]["schema"]["$ref"].endswith("/OpenAIErrorBody")
    assert completions["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/OpenAIErrorBody")


def test_the_spec_and_swagger_ui_are_served():
    served = lambda_handler(event("GET", "/openapi.json"), None)
    assert served["statusCode"] == 200
    assert json.loads(served["body"]) == openapi_spec(build_app())
    page = lambda_handler(event("GET", "/docs"), None)
    assert page["statusCode"] == 200
    assert page["multiValueHeaders"]["Content-Type"] == ["text/html; charset=utf-8"]
    assert "createChatCompletion" in page["body"]
    as_json = lambda_handler(event("GET", "/docs", query={"format": "json"}), None)
    assert json.loads(as_json["body"])["info"]["title"] == "Synapse"
