"""How a route hands the streaming server a job to stream.

Lambda behind API Gateway's buffered integration cannot send a body bit by bit, so a route validates
and submits, and when the streaming server (`frontdoor.http_server`) runs it, it puts in the sink the
server offered which job to follow and how to frame it; the server then streams the job's tokens from
Redis itself. The sink travels in the resolver's per-invocation context, never in the request, so no
client can ask for it. Without a sink the route answers buffered. Before it submits, a streaming route
asks the sink for a slot (`admit`): the server's stream limits (`frontdoor.stream_slots`) refuse a
stream before anything is queued.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import BaseRouter

from frontdoor.responses import json_response
from frontdoor.stream_slots import StreamSlots
from openai_api.errors import Problem
from openai_api.format import Shape

SINK_KEY = "synapse_stream_sink"

Framing = Literal["chat", "completion", "job"]


@dataclass(frozen=True, slots=True)
class StreamHandle:
    job_id: str
    model: str
    framing: Framing
    created_s: int = 0
    include_usage: bool = False
    cancel_on_disconnect: bool = True  # a /v1 stream is its generation; a job's stream is one reader of it
    shape: Shape = field(default_factory=Shape)  # a /v1 stream's choices


@dataclass(slots=True)
class StreamSink:
    """`slots`: the server's stream limits (None: none); `admitted`: the tenant a slot was taken for."""

    slots: StreamSlots | None = None
    handle: StreamHandle | None = None
    admitted: str | None = None
    # The route admits on a server thread, the server releases on its event loop.
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, tenant: str) -> Problem | None:
        """Takes one of the server's stream slots for the tenant, before the route submits anything; a
        Problem (429 or 503) when none is free. The server gives the slot back when the stream ends, or
        when the route answered without one."""
        with self._lock:
            if self.slots is None or self.admitted is not None:
                return None
            refused = self.slots.take(tenant)
            if refused is None:
                self.admitted = tenant
            return refused

    def release(self) -> None:
        """Gives the slot back; a route that admits after this (its server gave up on it) takes none."""
        with self._lock:
            if self.slots is not None and self.admitted is not None:
                self.slots.give_back(self.admitted)
            self.slots, self.admitted = None, None

    def stream(self, handle: StreamHandle) -> Response[str]:
        """What the route answers; the server streams in its place. Telemetry counts the job accepted by
        the body's jobId."""
        self.handle = handle
        return json_response(200, {"jobId": handle.job_id})


def offer(app: BaseRouter, sink: StreamSink) -> None:
    """Offers the sink to the route of the app's next invocation (Powertools clears it after)."""
    app.context[SINK_KEY] = sink


def offered(router: BaseRouter) -> StreamSink | None:
    """The sink offered to the current invocation's route: None when it answers buffered."""
    sink = router.context.get(SINK_KEY)
    return sink if isinstance(sink, StreamSink) else None


def admission(sink: StreamSink | None, tenant: str) -> Problem | None:
    """A stream's slot for the tenant, taken before its job is submitted; no sink, no stream to admit."""
    return None if sink is None else sink.admit(tenant)
