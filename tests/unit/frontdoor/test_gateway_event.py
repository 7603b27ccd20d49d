"""The local gateway must hand the handler the same event shape API Gateway does."""

import base64
import json
from typing import Any

from aiohttp.test_utils import make_mocked_request

from contract.tenants import KeyBook
from frontdoor.http_server import adapter_caller, from_proxy_response, problem_response, to_proxy_event
from frontdoor.tenancy import Caller
from local_stack.gateway import authenticate
from openai_api.errors import Problem


class _AnyMessage(str):
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(other)

    __hash__ = str.__hash__


ANY_MESSAGE: Any = _AnyMessage()


def test_a_json_request_becomes_a_rest_proxy_event():
    request = make_mocked_request(
        "POST", "/async-infer?x=1&x=2", headers={"Content-Type": "application/json", "x-api-key": "k"}
    )
    event = to_proxy_event(request, b'{"a": 1}')
    assert event["httpMethod"] == "POST"
    assert event["path"] == "/async-infer"
    assert event["body"] == '{"a": 1}' and event["isBase64Encoded"] is False
    assert event["headers"]["x-api-key"] == "k"
    assert event["multiValueQueryStringParameters"] == {"x": ["1", "2"]}
    assert event["queryStringParameters"] == {"x": "2"}


def test_a_binary_body_travels_base64_encoded():
    request = make_mocked_request(
        "POST", "/async-infer", headers={"Content-Type": "application/octet-stream"}
    )
    event = to_proxy_event(request, b"\xff\x00")
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == b"\xff\x00"


def test_a_proxy_response_becomes_an_http_response():
    response = from_proxy_response(
        {"statusCode": 202, "headers": {"Content-Type": "application/json"}, "body": '{"ok":1}'}
    )
    assert response.status == 202
    assert response.body == b'{"ok":1}'
    assert response.headers["Content-Type"] == "application/json"


def book_with(key: str, tenant: str = "acme") -> KeyBook:
    book = KeyBook()
    book.ensure_key(key, tenant)
    return book


def refusal(path: str, headers: dict[str, str]) -> tuple[int, dict[str, object]]:
    problem = authenticate(make_mocked_request("POST", path, headers=headers), book_with("sk-right"))
    assert isinstance(problem, Problem)
    response = problem_response(path, problem)
    assert response.body is not None
    return response.status, json.loads(bytes(response.body))  # type: ignore[arg-type]


def test_a_missing_or_wrong_key_is_refused_in_the_shape_of_the_paths_api():
    assert refusal("/async-infer", {}) == (
        401,
        {"error": {"code": "missing_api_key", "message": ANY_MESSAGE}},
    )
    status, body = refusal("/v1/completions", {"Authorization": "Bearer sk-wrong"})
    assert status == 403
    assert body["error"] == {
        "message": "the API key is not valid",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }


def test_the_right_key_names_its_tenant():
    keyed = make_mocked_request("GET", "/v1/models", headers={"x-api-key": "sk-right"})
    tenant = authenticate(keyed, book_with("sk-right", "acme"))
    assert not isinstance(tenant, Problem) and tenant.name == "acme"


def test_a_revoked_key_is_refused():
    book = book_with("sk-right")
    book.revoke(book.keys[0].id)
    keyed = make_mocked_request("GET", "/v1/models", headers={"x-api-key": "sk-right"})
    problem = authenticate(keyed, book)
    assert isinstance(problem, Problem) and (problem.status, problem.code) == (403, "invalid_api_key")


def test_the_caller_travels_as_an_authorizer_context_and_a_clients_own_context_header_never_does():
    forged = json.dumps({"authorizer": {"tenant": "victim", "maxInflight": "0"}})
    request = make_mocked_request("POST", "/async-infer", headers={"x-amzn-request-context": forged})
    event = to_proxy_event(request, b"{}", Caller("acme", 3).authorizer_context())
    assert event["requestContext"]["authorizer"] == {"tenant": "acme", "maxInflight": "3"}
    assert "x-amzn-request-context" not in {name.lower() for name in event["headers"]}
    assert "x-amzn-request-context" not in {name.lower() for name in event["multiValueHeaders"]}
    assert "authorizer" not in to_proxy_event(request, b"{}")["requestContext"]


def test_behind_the_lambda_web_adapter_the_caller_is_the_authorizers_from_the_request_context():
    context = {"requestId": "r1", "authorizer": {"principalId": "acme", "tenant": "acme", "maxInflight": "3"}}
    assert adapter_caller({"x-amzn-request-context": json.dumps(context)}) == Caller("acme", 3)
    for without in ({}, {"x-amzn-request-context": "null"}, {"x-amzn-request-context": "{not json"}):
        assert adapter_caller(without) is None
    assert adapter_caller({"x-amzn-request-context": json.dumps({"requestId": "r2"})}) is None
    # An authorizer context that names no tenant names no caller: never the default tenant.
    no_tenant = {"requestId": "r3", "authorizer": {"principalId": "api-key"}}
    assert adapter_caller({"x-amzn-request-context": json.dumps(no_tenant)}) is None
