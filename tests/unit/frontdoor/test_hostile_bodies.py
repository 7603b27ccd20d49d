"""Hostile bodies the front door must refuse with a JSON 4xx in Lambda too, before touching Redis:
nesting that would exhaust the parser's stack, oversize bodies, look-alike media types, and values of
the wrong JSON type that lax parsing would coerce ("16" or true for an integer)."""

import json
from typing import Any

import pytest

from frontdoor.schemas import MAX_BODY_BYTES
from openai_api.json_body import MAX_JSON_DEPTH, nests_deeper_than, strict_json_loads
from tests.unit.frontdoor.test_frontdoor_rejections import call, event

DEEP = 1000  # 2 KB of brackets: deeper than the interpreter's recursion limit allows json.loads


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/async-infer", "[" * DEEP + "]" * DEEP),
        ("/async-infer", '{"a":' * DEEP + "1" + "}" * DEEP),
        (
            "/async-infer",
            '{"model": "gpu-sim", "prompt": "x", "parameters": ' + "[" * DEEP + "]" * DEEP + "}",
        ),
        ("/v1/completions", "[" * DEEP),
        ("/v1/chat/completions", '{"messages":' * DEEP),
    ],
)
def test_json_nested_past_the_limit_gets_a_400_not_a_crash(route: str, body: str):
    status, payload = call(event("POST", route, body))
    assert status == 400
    assert payload["error"]["code"] == "json_too_deep"
    assert str(MAX_JSON_DEPTH) in payload["error"]["message"]


def test_nesting_up_to_the_limit_is_parsed():
    text = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert not nests_deeper_than(text, MAX_JSON_DEPTH)
    assert nests_deeper_than("[" + text + "]", MAX_JSON_DEPTH)
    assert strict_json_loads(text) == json.loads(text)


def test_a_deep_body_at_the_limit_reaches_validation():
    body = '{"model": "gpu-sim", "prompt": "x", "parameters": ' + "[" * 60 + "]" * 60 + "}"
    status, payload = call(event("POST", "/async-infer", body))
    assert (status, payload["error"]["code"]) == (400, "invalid_request")


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"prompt": "[" * DEEP}),  # brackets inside strings are text
        json.dumps({"prompt": '\\"[[[' * DEEP}),  # escaped quotes do not end the string
        '"' + "[" * DEEP,  # an unterminated string runs to the end
    ],
)
def test_brackets_inside_strings_do_not_count(text: str):
    assert not nests_deeper_than(text, MAX_JSON_DEPTH)


def test_a_pathological_string_is_scanned_once():
    """An open quote, then escaped quotes to the end: a naive pattern retries from each one (quadratic)."""
    text = '"' + '\\"' * 500_000
    assert not nests_deeper_than(text, MAX_JSON_DEPTH)


def test_a_body_over_the_limit_gets_413_before_parsing():
    body = "[" * (MAX_BODY_BYTES + 1)
    status, payload = call(event("POST", "/async-infer", body))
    assert (status, payload["error"]["code"]) == (413, "body_too_large")


def test_a_base64_body_over_the_limit_gets_413():
    ev = event("POST", "/v1/completions", "A" * (MAX_BODY_BYTES * 4 // 3 + 8))
    ev["isBase64Encoded"] = True
    status, payload = call(ev)
    assert status == 413
    assert payload["error"]["code"] == "body_too_large"
    assert payload["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "content_type",
    ["application/jsonx", "application/json-seq", "application/json-patch+json", "application/jsonp; a=b"],
)
@pytest.mark.parametrize("route", ["/async-infer", "/v1/completions"])
def test_a_look_alike_media_type_gets_415(route: str, content_type: str):
    body = json.dumps({"model": "gpu-sim", "prompt": "x"})
    status, payload = call(event("POST", route, body, content_type))
    assert (status, payload["error"]["code"]) == (415, "unsupported_media_type")


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON ;charset=UTF-8"]
)
def test_json_with_parameters_or_in_any_case_is_json(content_type: str):
    body = json.dumps({"model": "llama-9000", "prompt": "x"})
    status, payload = call(event("POST", "/async-infer", body, content_type))
    assert (status, payload["error"]["code"]) == (400, "unknown_model")


def submit(route: str, **fields: Any) -> tuple[int, dict[str, Any]]:
    body: dict[str, Any] = {"model": "gpu-sim", "prompt": "x"}
    if route == "/async-infer" and "max_tokens" in fields:
        body["parameters"] = {"max_tokens": fields.pop("max_tokens")}
    return call(event("POST", route, json.dumps({**body, **fields})))


@pytest.mark.parametrize("value", ["16", True, False, 16.5, "sixteen", [16]])
@pytest.mark.parametrize("route", ["/async-infer", "/v1/completions", "/v1/chat/completions"])
def test_max_tokens_must_be_a_json_integer(route: str, value: object):
    if route == "/v1/chat/completions":
        body = {"model": "gpu-sim", "messages": [{"role": "user", "content": "x"}], "max_tokens": value}
        status, payload = call(event("POST", route, json.dumps(body)))
    else:
        status, payload = submit(route, max_tokens=value)
    assert status == 400
    assert payload["error"]["code"] == "invalid_request"
    assert "max_tokens" in payload["error"]["message"]


@pytest.mark.parametrize(
    ("route", "fields", "param"),
    [
        ("/async-infer", {"timeoutMs": "1000"}, "timeoutMs"),
        ("/async-infer", {"timeoutMs": True}, "timeoutMs"),
        ("/v1/completions", {"seed": "1"}, "seed"),
        ("/v1/completions", {"seed": True}, "seed"),
        ("/v1/completions", {"temperature": "0.5"}, "temperature"),
        ("/v1/completions", {"top_p": True}, "top_p"),
        ("/v1/completions", {"stream": 1}, "stream"),
        ("/v1/completions", {"stream": "true"}, "stream"),
        ("/v1/completions", {"n": True}, "n"),
        ("/v1/completions", {"best_of": True}, "best_of"),
        ("/v1/completions", {"echo": 0}, "echo"),
        ("/v1/completions", {"stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
    ],
)
def test_numbers_and_booleans_are_strict(route: str, fields: dict[str, object], param: str):
    status, payload = submit(route, **fields)
    assert status == 400, payload
    assert payload["error"]["code"] in ("invalid_request", "unsupported_parameter")
    if route.startswith("/v1"):
        assert payload["error"]["param"] == param
    else:
        assert param in payload["error"]["message"]


def test_an_integer_is_still_a_number():
    status, payload = submit("/v1/completions", model="llama-9000", temperature=1, top_p=1, n=1)
    assert (status, payload["error"]["code"]) == (404, "model_not_found")


HUGE_INTEGER = "9" * 5000  # past the 4,300 digits Python's int() reads from text


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/async-infer", '{"model": "gpu-sim", "prompt": "x", "parameters": {"max_tokens": %s}}'),
        ("/v1/completions", '{"model": "gpu-sim", "prompt": "x", "max_tokens": %s}'),
        ("/v1/embeddings", '{"model": "minilm", "input": "x", "dimensions": -%s}'),
        ("/v1/chat/completions", '{"model": "gpu-sim", "messages": [], "seed": %s}'),
        ("/async-infer", "[%s]"),
    ],
)
def test_an_integer_too_long_to_read_gets_a_400_not_a_crash(route: str, body: str):
    status, payload = call(event("POST", route, body % HUGE_INTEGER))
    assert status == 400
    assert payload["error"]["code"] == "invalid_json"
    assert "4300 digits" in payload["error"]["message"]


def test_a_long_float_is_still_read():
    assert strict_json_loads("1." + "5" * 5000) == pytest.approx(14 / 9)
