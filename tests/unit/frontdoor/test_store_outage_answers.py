"""A job store that is away answers 503 with Retry-After, whatever kind of client found it away."""

from __future__ import annotations

import json

import pytest
from redis.exceptions import ClusterDownError, ConnectionError, RedisClusterException, TryAgainError

from frontdoor.handler import add_error_handlers
from frontdoor.powertools_adapter import IsolatedResolver
from tests.unit.frontdoor.test_frontdoor_rejections import event


@pytest.mark.parametrize(
    "error",
    [
        ConnectionError("connection refused"),
        RedisClusterException("Redis Cluster cannot be connected"),  # no node reachable
        ClusterDownError("CLUSTERDOWN the cluster is down"),
        TryAgainError("TRYAGAIN multi-key request during resharding"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_store_outage_is_a_503_with_retry_after(error: Exception):
    app = IsolatedResolver()
    add_error_handlers(app)

    @app.get("/results/<job_id>")
    def read(job_id: str) -> dict[str, str]:
        raise error

    response = app.resolve(event("GET", "/results/abc"), None)  # type: ignore[arg-type]
    assert response["statusCode"] == 503
    assert response["multiValueHeaders"]["Retry-After"] == ["1"]
    assert json.loads(response["body"])["error"]["code"] == "unavailable"
