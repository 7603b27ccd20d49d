"""Requests the front door turns away before touching Redis: no store is configured here at all."""

import json
from typing import Any

import pytest

from manager.frontdoor.handler import lambda_handler


def event(
    method: str,
    path: str,
    body: str | None = None,
    content_type: str = "application/json",
    query: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": {"Content-Type": content_type},
        "multiValueHeaders": {"Content-Type": [content_type]},
        "queryStringParameters": query,
        "multiValueQueryStringParameters": {k: [v] for k, v in (query or {}).items()} or None,
        "requestContext": {"stage": "local", "path": path, "httpMethod": method, "requestId": "r"},
        "body": body,
        "isBase64Encoded": False,
    }


def call(ev: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = lambda_handler(ev, None)
    return response["statusCode"], json.loads(response["body"])


@pytest.mark.parametrize(
    ("body", "code", "mentions"),
    [
        ("not json", "invalid_json", "JSON"),
        ("{}", "invalid_request", "model"),
        ('{"model": "gpu-sim"}', "invalid_request", "prompt"),
        ('{"model": "gpu-sim", "prompt": ""}', "invalid_request", "prompt"),
        ('{"model": "gpu-sim", "prompt": 5}', "invalid_request", "prompt"),
        (
            '{"model": "gpu-sim", "prompt": "x", "parameters": {"max_tokens": -1}}',
            "invalid_request",
            "max_tokens",
        ),
        ('{"model": "gpu-sim", "prompt": "x", "colour": "red"}', "invalid_request", "colour"),
        ('{"model": "llama-9000", "prompt": "x"}', "unknown_model", "llama-9000"),
    ],
)
def test_bad_submissions_get_a_400_naming_the_problem(body: str, code: str, mentions: str):
    status, payload = call(event("POST", "/async-infer", body))
    assert status == 400
    assert payload["error"]["code"] == code
    assert mentions in payload["error"]["message"]


def test_a_prompt_over_the_limit_gets_413(monkeypatch: pytest.MonkeyPatch):
    from manager.frontdoor import handler

    limit = handler.settings().max_prompt_chars
    status, payload = call(
        event("POST", "/async-infer", json.dumps({"model": "gpu-sim", "prompt": "x" * (limit + 1)}))
    )
    assert status == 413
    assert payload["error"]["code"] == "prompt_too_large"


def test_a_form_encoded_body_gets_415():
    status, payload = call(
        event("POST", "/async-infer", "model=gpu-sim&prompt=x", "application/x-www-form-urlencoded")
    )
    assert status == 415
    assert payload["error"]["code"] == "unsupported_media_type"


def test_a_wait_beyond_20_seconds_gets_400():
    ev = event("GET", "/results/00000000-0000-0000-0000-000000000000", query={"wait": "99"})
    status, payload = call(ev)
    assert status == 400
    assert "wait" in payload["error"]["message"]


def test_an_unknown_route_gets_a_json_404():
    status, payload = call(event("GET", "/nowhere"))
    assert status == 404
    assert payload["error"]["code"] == "not_found"
