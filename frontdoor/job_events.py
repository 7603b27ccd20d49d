"""Server-Sent Events of an asynchronous job (`GET /results/{jobId}/stream`): pure framing, no I/O.

id: <entry id>        (resume after it with the Last-Event-ID header)
event: delta          data: {"text": "...", "tokens": n}
event: reset          data: {"reason": "..."}   (the job restarted: discard the text so far)
event: end            data: the job as GET /results/{jobId} shows it
event: error          data: {"error": {"code", "message"}}   (the stream broke off; the job goes on:
                      reconnect with Last-Event-ID)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract import tokens
from frontdoor.responses import dumps
from openai_api.errors import Problem, synapse_body


def _event(name: str, data: Any, entry_id: str = "") -> str:
    head = f"id: {entry_id}\n" if entry_id else ""
    return f"{head}event: {name}\ndata: {dumps(data)}\n\n"


def job_event(event: tokens.Delta | tokens.Reset) -> str:
    if isinstance(event, tokens.Reset):
        return _event("reset", {"reason": event.reason}, event.entry_id)
    return _event("delta", {"text": event.text, "tokens": event.tokens}, event.entry_id)


def end_event(view: Mapping[str, Any], entry_id: str = "") -> str:
    return _event("end", dict(view), entry_id)


def error_event(problem: Problem) -> str:
    """The last event of a stream that broke off before its end: an SSE client that saw no error
    would take the EOF for the end of a job that has not ended."""
    return _event("error", synapse_body(problem))
