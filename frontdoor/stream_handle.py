"""How a route hands a stream to the HTTP server that can send it.

Lambda behind API Gateway's buffered integration cannot send a body bit by bit, so a route validates
and submits, and when the request came through a streaming server (`frontdoor.http_server`, which
marks the event it builds: no client can set `requestContext`), it answers at once with a handle in
the `X-Synapse-Stream` header: which job to follow and how to frame it. The server then streams the
job's tokens from Redis itself. Without the mark the route answers buffered, as before.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

from aws_lambda_powertools.event_handler import Response

from frontdoor.responses import json_response

STREAMING_MARK = "synapseStreaming"
HANDLE_HEADER = "X-Synapse-Stream"

Framing = Literal["chat", "completion", "job"]


@dataclass(frozen=True, slots=True)
class StreamHandle:
    job_id: str
    model: str
    framing: Framing
    created_s: int = 0
    include_usage: bool = False
    cancel_on_disconnect: bool = True  # a /v1 stream is its generation; a job's stream is one reader of it

    def encode(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> StreamHandle:
        return cls(**json.loads(text))


def marked(event: Any) -> dict[str, Any]:
    """The event, marked as coming through a streaming server."""
    context = dict(event.get("requestContext") or {})
    context[STREAMING_MARK] = True
    return {**event, "requestContext": context}


def can_stream(event: Any) -> bool:
    """Whether the request came through a streaming server (the current proxy event's mark)."""
    return bool((event.raw_event.get("requestContext") or {}).get(STREAMING_MARK))


def handle_response(handle: StreamHandle) -> Response[str]:
    return json_response(200, {"jobId": handle.job_id}, {HANDLE_HEADER: handle.encode()})
