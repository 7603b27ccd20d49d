"""API Gateway's request authorizer: lets a client present its API key as `Authorization: Bearer`.

API Gateway's usage plans read the key from `x-api-key` only, but OpenAI clients send a bearer
token. With the API's key source set to AUTHORIZER, this function hands API Gateway whichever of the
two the request carries as `usageIdentifierKey`; API Gateway itself then checks it against the
usage plan (403 for a key it does not know), exactly as for `x-api-key`. It decides nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from frontdoor.api_key import presented_key


class UnauthorizedError(Exception):
    """Raised with the message "Unauthorized": API Gateway answers 401 without calling the API."""


def handler(event: Mapping[str, Any], context: object) -> dict[str, Any]:
    key = presented_key(event.get("headers"))
    if key is None:
        raise UnauthorizedError("Unauthorized")
    return {
        "principalId": "api-key",
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [
                {"Action": "execute-api:Invoke", "Effect": "Allow", "Resource": event["methodArn"]}
            ],
        },
        "usageIdentifierKey": key,
    }
