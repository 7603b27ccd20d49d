"""The local gateway must hand the handler the same event shape API Gateway does."""

import base64
import json
from typing import Any

from aiohttp.test_utils import make_mocked_request

from frontdoor.http_server import from_proxy_response, to_proxy_event
from local_stack.gateway import api_key_problem


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


def refusal(path: str, headers: dict[str, str]) -> tuple[int, dict[str, object]]:
    response = api_key_problem(make_mocked_request("POST", path, headers=headers), "sk-right")
    assert response is not None and response.body is not None
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


def test_the_right_key_and_healthz_pass():
    keyed = make_mocked_request("GET", "/v1/models", headers={"x-api-key": "sk-right"})
    assert api_key_problem(keyed, "sk-right") is None
    assert api_key_problem(make_mocked_request("GET", "/healthz"), "sk-right") is None
