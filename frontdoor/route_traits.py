"""What a route declares of itself for the streaming server (`frontdoor.http_server`), under its
Powertools decorator: whether it may answer with a stream, and whether it may wait on a job (a
synchronous call, which holds its thread; a long-poll, which in the server holds none) or cancel one.
The server reads the second before the route runs, to pick its lane (`frontdoor.lanes`); the handler
reads the first, and offers the stream only to a route that declares it (`frontdoor.stream_handle`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from frontdoor.lanes import LaneName
from frontdoor.powertools_adapter import IsolatedResolver

_ATTRIBUTE = "synapse_route_traits"
RouteFunc = TypeVar("RouteFunc", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Traits:
    streams: bool = False
    waits: bool = False  # holds its thread on a job (up to 25 s): a synchronous call
    wait_param: str | None = None  # ... only when this query parameter is a number over 0
    cancels: bool = False  # waits a moment for a job to stop: quick work, never behind long-polls

    def lane(self, query: Mapping[str, str]) -> LaneName:
        if self.cancels:
            return "cancels"
        return "waits" if self.waits_on_a_job(query) else "general"

    def waits_on_a_job(self, query: Mapping[str, str]) -> bool:
        """A malformed wait is refused at once: not one."""
        if self.waits:
            return True
        if self.wait_param is None:
            return False
        try:
            return float(query.get(self.wait_param) or "0") > 0
        except ValueError:
            return False


PLAIN = Traits()


def declares(
    *, streams: bool = False, waits: bool = False, wait_param: str | None = None, cancels: bool = False
) -> Callable[[RouteFunc], RouteFunc]:
    traits = Traits(streams, waits, wait_param, cancels)

    def mark(func: RouteFunc) -> RouteFunc:
        setattr(func, _ATTRIBUTE, traits)
        return func

    return mark


def traits_for(app: IsolatedResolver, method: str, path: str) -> Traits:
    """What the route that serves this request declares; a request no route serves declares nothing."""
    route = app.route_for(method, path)
    found = None if route is None else getattr(route.func, _ATTRIBUTE, None)
    return found if isinstance(found, Traits) else PLAIN
