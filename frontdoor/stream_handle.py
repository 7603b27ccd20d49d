"""How a route hands the streaming server a job to stream, or a job to wait on.

Lambda behind API Gateway's buffered integration cannot send a body bit by bit, so a route validates
and submits, and when the streaming server (`frontdoor.http_server`) runs it, it puts in the sink the
server offered which job to follow and how to frame it; the server then streams the job's tokens from
Redis itself. The sink travels in the resolver's per-invocation context, never in the request, so no
client can ask for it. Without a sink the route answers buffered. Before it submits, a streaming route
asks the sink for a slot (`admit`): the server's stream limits (`frontdoor.stream_slots`) refuse a
stream before anything is queued.

A route declares how its stream is framed by the handle it hands over: a job's own event stream
(`framer` None: deltas, resets and its final view, resumable), or an answer framed by the route's own
`AnswerFramer` (OpenAI's chunks, say). The server runs one loop per kind and never names a route's
format, so a new streamed endpoint is a route and a framer, nothing else.

A long-poll (`GET /results/{id}?wait=N`) hands the server its wait in the same sink (`defer`): the
server waits on the job's end on its event loop, holding no thread (frontdoor/job_waits.py), then asks
the route again with no wait. Without a sink the route blocks on the job itself, as in API Gateway's
Lambda, where each invocation has its own environment anyway.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import BaseRouter

from contract import tokens
from frontdoor.responses import json_response
from frontdoor.stream_slots import StreamSlots
from openai_api.errors import Problem

SINK_KEY = "synapse_stream_sink"


class AnswerFramer(Protocol):
    """Turns one job's token events into a streamed answer's SSE text, event by event. Pure: the server
    reads the events and writes the text; an empty string sends nothing."""

    @property
    def job_id(self) -> str: ...

    def delta(self, text: str, index: int = 0, logprobs: Sequence[Any] = ()) -> str:
        """One choice's new text (and its tokens' log-probabilities, when asked for)."""
        ...

    def finish(self, end: tokens.End) -> str:
        """The end of a completed job's answer: finish reasons, usage, the closing event."""
        ...

    def error(self, problem: Problem) -> str:
        """The last event of a stream that broke off after it began."""
        ...


@dataclass(frozen=True, slots=True)
class StreamHandle:
    """The job the server streams in the route's place, and how: `framer` None streams the job's own
    events (GET /results/{id}/stream); an answer stream cancels its job when its client leaves, since
    the stream is the generation, while a job's stream is one reader of it, as is a `detached` answer
    stream (a background response's: its job goes on, and its client may come back)."""

    job_id: str
    model: str
    framer: AnswerFramer | None = None
    detached: bool = False

    @property
    def cancel_on_disconnect(self) -> bool:
        return self.framer is not None and not self.detached


@dataclass(frozen=True, slots=True)
class DeferredWait:
    """A long-poll's wait, left to the server: up to `seconds` for the job to end."""

    job_id: str
    seconds: float


@dataclass(slots=True)
class StreamSink:
    """`slots`: the server's stream limits (None: none); `admitted`: the tenant a slot was taken for."""

    slots: StreamSlots | None = None
    handle: StreamHandle | None = None
    admitted: str | None = None
    waiting: DeferredWait | None = None
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

    def defer(self, job_id: str, seconds: float) -> None:
        """Leaves the wait on the job to the server; the route answers with the job as it is now, which
        the server replaces with the route's answer once the wait is over."""
        self.waiting = DeferredWait(job_id, seconds)


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
