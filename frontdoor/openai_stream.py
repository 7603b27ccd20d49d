"""OpenAI's streaming framing: one SSE `data:` chunk per delta, the finish reason, the usage when
asked, then `data: [DONE]`; streamed from a job's token events, or buffered from a finished answer.
An error after the stream began goes as a last `data: {"error": ...}` event, which OpenAI's SDKs
raise as an APIError. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from contract import tokens
from frontdoor.errors import Problem, openai_body
from frontdoor.openai_schemas import (
    ChatChunkChoice,
    ChatCompletionChunk,
    CompletionChunk,
    CompletionChunkChoice,
    Delta,
    FinishReason,
)
from frontdoor.responses import dumps
from frontdoor.schemas import Usage

DONE = "data: [DONE]\n\n"


def sse(chunk: BaseModel) -> str:
    return f"data: {chunk.model_dump_json(exclude_none=False)}\n\n"


def error_event(problem: Problem) -> str:
    return f"data: {dumps(openai_body(problem))}\n\n"


@dataclass(slots=True)
class ChunkFraming:
    """The chunks of one streamed completion (`kind` "completion") or chat completion ("chat")."""

    kind: Literal["chat", "completion"]
    job_id: str
    model: str
    created_s: int
    include_usage: bool
    _started: bool = False

    def _chunk(
        self, text: str | None, finish: FinishReason | None, usage: Usage | None = None, *,
        empty: bool = False,
    ) -> BaseModel:  # fmt: skip
        if self.kind == "completion":
            choices = [] if empty else [CompletionChunkChoice(index=0, text=text or "", finish_reason=finish)]
            return CompletionChunk(
                id=f"cmpl-{self.job_id}", created=self.created_s, model=self.model, choices=choices,
                usage=usage,
            )  # fmt: skip
        role: Literal["assistant"] | None = None if self._started else "assistant"
        delta = Delta() if finish is not None else Delta(role=role, content=text)
        chat_choices = [] if empty else [ChatChunkChoice(index=0, delta=delta, finish_reason=finish)]
        return ChatCompletionChunk(
            id=f"chatcmpl-{self.job_id}", created=self.created_s, model=self.model, choices=chat_choices,
            usage=usage,
        )  # fmt: skip

    def delta(self, text: str) -> str:
        chunk = sse(self._chunk(text, None))
        self._started = True
        return chunk

    def end(self, finish_reason: str, usage: Usage) -> str:
        """The finish reason, the usage when asked, and [DONE], for a job that completed."""
        finish: FinishReason = "length" if finish_reason == "length" else "stop"
        events = [sse(self._chunk(None, finish))]
        if self.include_usage:
            events.append(sse(self._chunk(None, None, usage, empty=True)))
        events.append(DONE)
        return "".join(events)


def usage_of(end: tokens.End) -> Usage:
    return Usage(
        prompt_tokens=end.prompt_tokens,
        completion_tokens=end.completion_tokens,
        total_tokens=end.prompt_tokens + end.completion_tokens,
    )
