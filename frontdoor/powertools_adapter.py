"""The one place the front door bends Powertools' REST resolver; written against aws-lambda-powertools
3.37, whose behaviour tests/unit/frontdoor/test_powertools_adapter.py pins.

Two bends. Powertools keeps a request's state (the current event, the Lambda context, the routing
context, the middleware frames) on its shared router class or on the resolver: right for Lambda (one
invocation per process at a time), wrong for the streaming server, which runs invocations side by side
in threads. So the resolver keeps that state per thread, as Powertools' own HTTP resolver keeps it per
request (`HttpResolverLocal`), and one resolver serves every thread: building one per thread (10 ms of
CPU each) was what a burst of a thousand long-polls, each on a new thread, waited for. And Powertools
offers no look-up of its routes, which a 405's Allow header and the streaming server
(frontdoor/route_traits.py) need: `route_for` reads its private route lists, matching as its own routing
does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.api_gateway import Route
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from aws_lambda_powertools.utilities.typing import LambdaContext


class _RequestState(threading.local):
    """What one invocation holds while it resolves: Powertools' per-request attributes."""

    def __init__(self) -> None:
        self.event: APIGatewayProxyEvent | None = None
        self.lambda_context: LambdaContext | None = None
        self.context: dict[str, Any] = {}
        self.processed_stack_frames: list[str] = []


class IsolatedResolver(APIGatewayRestResolver):
    """A resolver whose request state is its thread's own: one serves invocations side by side."""

    def __init__(self, *, json_body_deserializer: Callable[[str], Any] | None = None, **options: Any) -> None:
        self._state = _RequestState()  # before Powertools' own __init__, which sets some of it
        super().__init__(json_body_deserializer=json_body_deserializer, **options)
        self._deserializer = json_body_deserializer

    @property
    def current_event(self) -> Any:
        return self._state.event

    @current_event.setter
    def current_event(self, value: Any) -> None:
        self._state.event = value

    @property
    def lambda_context(self) -> Any:
        return self._state.lambda_context

    @lambda_context.setter
    def lambda_context(self, value: Any) -> None:
        self._state.lambda_context = value

    @property  # an attribute in Powertools
    def context(self) -> dict[str, Any]:
        return self._state.context

    @context.setter
    def context(self, value: dict[str, Any]) -> None:
        self._state.context = value

    @property  # an attribute in Powertools
    def processed_stack_frames(self) -> list[str]:
        return self._state.processed_stack_frames

    @processed_stack_frames.setter
    def processed_stack_frames(self, value: list[str]) -> None:
        self._state.processed_stack_frames = value

    def resolve(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        # Powertools assigns both to its router class, not through these properties: set them first.
        self._state.event = APIGatewayProxyEvent(dict(event), self._deserializer)
        self._state.lambda_context = context
        return super().resolve(event, context)

    def route_for(self, method: str, path: str) -> Route | None:
        """The route that `resolve` would run for this request, or None (it answers 404 or 405)."""
        method = method.upper()
        for route in self._static_routes + self._dynamic_routes:
            if route.method == method and route.rule.match(path):
                return route
        return None

    def allowed_methods(self, path: str) -> list[str]:
        """Methods some route serves on this path, for a 405's Allow header."""
        routes = self._static_routes + self._dynamic_routes
        return sorted({route.method for route in routes if route.rule.match(path)})
