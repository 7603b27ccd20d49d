"""The request authorizer passes the presented key on to API Gateway's usage plan, whichever header."""

import pytest

from frontdoor.api_key import presented_key
from frontdoor.authorizer import UnauthorizedError, handler

ARN = "arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/POST/v1/chat/completions"


@pytest.mark.parametrize(
    ("headers", "key"),
    [
        ({"x-api-key": "k1"}, "k1"),
        ({"X-Api-Key": "k1"}, "k1"),
        ({"Authorization": "Bearer k2"}, "k2"),
        ({"authorization": "bearer   k2 "}, "k2"),
        ({"x-api-key": "k1", "Authorization": "Bearer k2"}, "k1"),
        ({"Authorization": "Basic dXNlcg=="}, None),
        ({"x-api-key": "  "}, None),
        ({}, None),
        (None, None),
    ],
)
def test_the_key_comes_from_x_api_key_or_a_bearer_token(headers, key):
    assert presented_key(headers) == key


def test_a_request_with_a_key_is_allowed_and_metered_by_that_key():
    answer = handler({"methodArn": ARN, "headers": {"Authorization": "Bearer sk-abc"}}, None)
    assert answer["usageIdentifierKey"] == "sk-abc"
    assert answer["policyDocument"]["Statement"] == [
        {"Action": "execute-api:Invoke", "Effect": "Allow", "Resource": ARN}
    ]


def test_a_request_without_a_key_is_unauthorized():
    with pytest.raises(UnauthorizedError, match=r"^Unauthorized$"):
        handler({"methodArn": ARN, "headers": {"content-type": "application/json"}}, None)
