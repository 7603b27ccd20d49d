"""Error bodies in the two shapes the API speaks.

Synapse routes answer `{"error": {"code", "message"}}`; the OpenAI-compatible `/v1` routes answer
OpenAI's `{"error": {"message", "type", "param", "code"}}`, so that OpenAI clients raise their usual
exceptions. A `Problem` is the one value both shapes are drawn from; the path decides the shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

OPENAI_PREFIX = "/v1"


@dataclass(frozen=True, slots=True)
class Problem:
    """A 4xx or 5xx answer: status, a stable machine code and a message a person can act on."""

    status: int
    code: str
    message: str
    param: str | None = None
    job_id: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


def is_openai_path(path: str) -> bool:
    return path == OPENAI_PREFIX or path.startswith(OPENAI_PREFIX + "/")


def openai_error_type(status: int) -> str:
    """OpenAI's error `type`: clients branch on the status code; the type is for people reading logs."""
    return "invalid_request_error" if status < 500 else "server_error"


def synapse_body(problem: Problem) -> dict[str, Any]:
    detail: dict[str, Any] = {"code": problem.code, "message": problem.message}
    if problem.job_id is not None:
        detail["jobId"] = problem.job_id
    return {"error": detail}


def openai_body(problem: Problem) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "message": problem.message,
        "type": openai_error_type(problem.status),
        "param": problem.param,
        "code": problem.code,
    }
    if problem.job_id is not None:
        detail["jobId"] = problem.job_id
    return {"error": detail}


def body_for(path: str, problem: Problem) -> dict[str, Any]:
    return openai_body(problem) if is_openai_path(path) else synapse_body(problem)
