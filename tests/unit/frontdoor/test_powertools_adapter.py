"""What frontdoor/powertools_adapter.py relies on Powertools' REST resolver to do (written against
aws-lambda-powertools 3.37). A Powertools release that changes any of it fails here, not in production."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.api_gateway import Router

from frontdoor.powertools_adapter import IsolatedResolver
from frontdoor.stream_handle import StreamSink, offer, offered
from tests.unit.frontdoor.test_frontdoor_rejections import event


def side_by_side(make: Callable[[], APIGatewayRestResolver]) -> list[str]:
    """Two resolvers resolve at once on two threads, each route reading its app's current event only
    once both have begun; returns the paths they read."""
    both_in = threading.Barrier(2, timeout=10)

    def resolve(path: str) -> str:
        app = make()

        @app.get(path)
        def read() -> dict[str, str]:
            both_in.wait()
            return {"path": app.current_event.path}

        answer = app.resolve(event("GET", path), None)  # type: ignore[arg-type]
        return str(json.loads(answer["body"])["path"])

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(resolve, ["/first", "/second"]))


def test_each_isolated_resolver_reads_its_own_event_while_another_resolves():
    assert side_by_side(IsolatedResolver) == ["/first", "/second"]


def test_one_isolated_resolver_gives_each_thread_its_own_event_and_routing_context():
    """The streaming server's threads share one app: each invocation sees its own request."""
    app = IsolatedResolver()
    both_in = threading.Barrier(2, timeout=10)

    @app.get("/<name>")
    def read(name: str) -> dict[str, str]:
        both_in.wait()
        return {"path": app.current_event.path, "name": name, "marked": app.context.get("mark", "")}

    def resolve(path: str) -> dict[str, str]:
        app.append_context(mark=path)
        answer: dict[str, str] = json.loads(app.resolve(event("GET", path), None)["body"])  # type: ignore[arg-type]
        return answer

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(resolve, ["/first", "/second"]))
    assert answers == [
        {"path": "/first", "name": "first", "marked": "/first"},
        {"path": "/second", "name": "second", "marked": "/second"},
    ]
    assert app.context == {}  # cleared after each invocation, on each thread


def test_powertools_alone_shares_the_current_event_between_resolvers():
    """Why the adapter keeps the event: if this fails, Powertools isolates invocations itself."""
    paths = side_by_side(APIGatewayRestResolver)
    assert paths[0] == paths[1]


def test_an_isolated_resolver_keeps_its_lambda_context():
    app = IsolatedResolver()
    context: Any = object()

    @app.get("/ctx")
    def read() -> dict[str, bool]:
        return {"same": app.lambda_context is context}

    assert json.loads(app.resolve(event("GET", "/ctx"), context)["body"]) == {"same": True}


def routed_app() -> IsolatedResolver:
    """Routes that answer with their own name, one of them on an included router."""
    app = IsolatedResolver()
    router = Router()  # type: ignore[no-untyped-call]
    for method, rule, name in [
        ("GET", "/a", "get_a"),
        ("POST", "/a", "post_a"),
        ("GET", "/items/<item_id>", "item"),
        ("GET", "/items/<item_id>/sub", "sub"),
    ]:

        def named(name: str = name, **_: str) -> dict[str, str]:
            return {"route": name}

        named.__name__ = name
        (router if name == "sub" else app).route(rule, method)(named)
    app.include_router(router)
    return app


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/a"),
        ("GET", "/a/"),
        ("post", "/a"),
        ("GET", "/items/x-1"),
        ("GET", "/items/x-1/sub"),
        ("GET", "/items/x-1/sub/"),
        ("DELETE", "/a"),
        ("GET", "/items"),
        ("GET", "/items/x/y"),
        ("GET", "/nowhere"),
    ],
)
def test_route_for_finds_the_route_that_resolve_runs(method: str, path: str):
    app = routed_app()
    found = app.route_for(method, path)
    answer = app.resolve(event(method.upper(), path), None)  # type: ignore[arg-type]
    if found is None:
        assert answer["statusCode"] == 404
    else:
        assert json.loads(answer["body"]) == {"route": found.func.__name__}


def test_allowed_methods_are_those_of_every_route_on_the_path():
    app = routed_app()
    assert app.allowed_methods("/a") == ["GET", "POST"]
    assert app.allowed_methods("/items/x/sub") == ["GET"]
    assert app.allowed_methods("/nowhere") == []


def test_a_sink_offered_to_the_app_reaches_an_included_routers_route_for_one_invocation():
    app = IsolatedResolver()
    router = Router()  # type: ignore[no-untyped-call]
    sink = StreamSink()

    @router.get("/offered")
    def was_offered() -> dict[str, bool]:
        return {"offered": offered(router) is sink}

    app.include_router(router)
    offer(app, sink)
    assert json.loads(app.resolve(event("GET", "/offered"), None)["body"]) == {"offered": True}  # type: ignore[arg-type]
    assert offered(app) is None, "the context is cleared after each invocation"
    assert json.loads(app.resolve(event("GET", "/offered"), None)["body"]) == {"offered": False}  # type: ignore[arg-type]
