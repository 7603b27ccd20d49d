"""How a route hands the streaming server a job to stream.

Lambda behind API Gateway's buffered integration cannot send a body bit by bit, so a route validates
and submits, and when the streaming server (`frontdoor.http_server`) runs it, it puts in the sink the
server offered which job to follow and how to frame it; the server then streams the job's tokens from
Redis itself. The sink travels in the resolver's per-invocation context, never in the request, so no
client can ask for it. Without a sink the route answers buffered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import BaseRouter

from frontdoor.openai_format import Shape
from frontdoor.responses import json_response

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
    handle: StreamHandle | None = None

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
