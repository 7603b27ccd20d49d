"""HTTP responses of the front door: JSON, Server-Sent Events, and errors in the path's shape."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types

from openai_api.errors import Problem, body_for

EVENT_STREAM = "text/event-stream"


def dumps(body: Any) -> str:
    """Compact JSON, non-ASCII kept as is; escaped when a string holds a lone surrogate (not UTF-8)."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":"))
    return text


def json_response(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Response[str]:
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=dumps(body),
        headers=dict(headers or {}),
    )


def sse_response(body: str) -> Response[str]:
    return Response(
        status_code=200, content_type=EVENT_STREAM, body=body, headers={"Cache-Control": "no-cache"}
    )


def problem_response(path: str, problem: Problem) -> Response[str]:
    return json_response(problem.status, body_for(path, problem), problem.headers)
