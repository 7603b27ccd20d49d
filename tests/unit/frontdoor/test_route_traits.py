"""Which routes stream or wait on a job is declared on the route: the streaming server picks a thread
pool by it, and the handler offers a stream only to a route that declares one."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from frontdoor.handler import build_app, resolve
from frontdoor.openapi import openapi_spec
from frontdoor.powertools_adapter import IsolatedResolver
from frontdoor.route_traits import Traits, declares, traits_for
from frontdoor.stream_handle import StreamSink, offered
from tests.unit.frontdoor.test_frontdoor_rejections import event


def every_route() -> dict[tuple[str, str], Traits]:
    """Each route of the front door, a path for it, and what it declares."""
    app = build_app()
    found: dict[tuple[str, str], Traits] = {}
    for rule, operations in openapi_spec(app)["paths"].items():
        path = re.sub(r"\{\w+\}", "abc", rule)
        for method in operations:
            found[(method.upper(), path)] = traits_for(app, method, path)
    return found


def test_the_v1_answers_and_a_jobs_stream_are_the_routes_that_stream():
    streaming = {route for route, traits in every_route().items() if traits.streams}
    assert streaming == {
        ("POST", "/v1/completions"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/responses"),
        ("GET", "/v1/responses/abc"),
        ("GET", "/results/abc/stream"),
    }


def test_the_routes_that_wait_on_a_job_are_declared_so():
    waiting = {route: (traits.waits, traits.wait_param) for route, traits in every_route().items()}
    assert {route for route, declared in waiting.items() if declared != (False, None)} == {
        ("POST", "/v1/completions"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/embeddings"),
        ("POST", "/v1/responses"),
        ("GET", "/results/abc"),
    }
    assert waiting[("GET", "/results/abc")] == (False, "wait")


def test_cancels_are_the_routes_on_the_cancels_lane():
    cancelling = {route for route, traits in every_route().items() if traits.cancels}
    assert cancelling == {
        ("POST", "/jobs/abc/cancel"),
        ("POST", "/v1/responses/abc/cancel"),
        ("DELETE", "/v1/responses/abc"),
    }


def answer(response: dict[str, Any]) -> Any:
    return json.loads(response["body"])


@pytest.fixture
def app() -> IsolatedResolver:
    app = IsolatedResolver()

    @app.get("/streams")
    @declares(streams=True)
    def streams() -> dict[str, bool]:
        return {"offered": offered(app) is not None}

    @app.get("/waits")
    @declares(waits=True)
    def waits() -> dict[str, bool]:
        return {"offered": offered(app) is not None}

    return app


def test_only_a_route_that_declares_it_streams_is_offered_the_sink(app: IsolatedResolver):
    assert answer(resolve(app, event("GET", "/streams"), None, StreamSink())) == {"offered": True}
    assert answer(resolve(app, event("GET", "/waits"), None, StreamSink())) == {"offered": False}


def test_without_a_streaming_server_no_route_is_offered_a_sink(app: IsolatedResolver):
    """API Gateway's buffered integration calls lambda_handler, which passes none."""
    assert answer(resolve(app, event("GET", "/streams"), None, None)) == {"offered": False}


def test_a_body_no_route_may_read_is_refused_before_routing(app: IsolatedResolver):
    refused = resolve(app, event("POST", "/nowhere", "a=b", "text/plain"), None, StreamSink())
    assert (refused["statusCode"], answer(refused)["error"]["code"]) == (415, "unsupported_media_type")
