"""The one place the front door bends Powertools' REST resolver; written against aws-lambda-powertools
3.37, whose behaviour tests/unit/frontdoor/test_powertools_adapter.py pins.

Two bends. Powertools keeps the current event and Lambda context on its shared router class: right for
Lambda (one invocation per process at a time), wrong for the streaming server, which runs invocations
side by side in threads. So each thread gets its own resolver, which keeps them on itself, as each
Lambda execution environment has its own. And Powertools offers no look-up of its routes, which a 405's
Allow header and the streaming server (frontdoor/route_traits.py) need: `route_for` reads its private
route lists, matching as its own routing does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.api_gateway import Route
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent
from aws_lambda_powertools.utilities.typing import LambdaContext


class IsolatedResolver(APIGatewayRestResolver):
    """A resolver that keeps the current event and Lambda context on itself; one per thread."""

    def __init__(self, *, json_body_deserializer: Callable[[str], Any] | None = None, **options: Any) -> None:
        super().__init__(json_body_deserializer=json_body_deserializer, **options)
        self._deserializer = json_body_deserializer
        self._own_event: APIGatewayProxyEvent | None = None
        self._own_context: LambdaContext | None = None

    @property
    def current_event(self) -> Any:
        return self._own_event

    @current_event.setter
    def current_event(self, value: Any) -> None:
        self._own_event = value

    @property
    def lambda_context(self) -> Any:
        return self._own_context

    @lambda_context.setter
    def lambda_context(self, value: Any) -> None:
        self._own_context = value

    def resolve(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        # Powertools assigns both to its router class, not through these properties: set them first.
        self._own_event = APIGatewayProxyEvent(dict(event), self._deserializer)
        self._own_context = context
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
