"""The local gateway must hand the handler the same event shape API Gateway does."""

import base64

from aiohttp.test_utils import make_mocked_request

from manager.gateway import from_proxy_response, to_proxy_event


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
