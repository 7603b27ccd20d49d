"""OpenAI's streaming framing: one SSE `data:` chunk per delta, the finish reason, the usage when
asked, then `data: [DONE]`; streamed from a job's token events, or buffered from a finished answer.
An error after the stream began goes as a last `data: {"error": ...}` event, which OpenAI's SDKs
raise as an APIError. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from contract import tokens
from frontdoor.responses import dumps
from openai_api.answer_schemas import (
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatLogprobs,
    CompletionChunk,
    CompletionChunkChoice,
    Delta,
    FinishReason,
    FunctionCallDelta,
    ToolCallDelta,
)
from openai_api.errors import Problem, openai_body
from openai_api.format import Shape, call_id, chat_logprobs, completion_logprobs, tool_call
from openai_api.sampling import Usage

DONE = "data: [DONE]\n\n"


def sse(chunk: BaseModel) -> str:
    return f"data: {chunk.model_dump_json(exclude_none=False)}\n\n"


def error_event(problem: Problem) -> str:
    return f"data: {dumps(openai_body(problem))}\n\n"


@dataclass(slots=True)
class ChunkFraming:
    """The chunks of one streamed completion (`kind` "completion") or chat completion ("chat"), of
    `shape.n` choices; a tool call's text goes out as `tool_calls` deltas (a named function's arguments
    as they come, a required call, which names its function inside its JSON, whole at its end)."""

    kind: Literal["chat", "completion"]
    job_id: str
    model: str
    created_s: int
    include_usage: bool
    shape: Shape = field(default_factory=Shape)
    _started: set[int] = field(default_factory=set)
    _held: dict[int, list[str]] = field(default_factory=dict)  # a required call's text, per choice
    _offsets: dict[int, int] = field(default_factory=dict)  # completions' text_offset, per choice

    def _chunk(self, choices: list[Any], usage: Usage | None = None) -> BaseModel:
        if self.kind == "completion":
            return CompletionChunk(
                id=f"cmpl-{self.job_id}", created=self.created_s, model=self.model, choices=choices,
                usage=usage,
            )  # fmt: skip
        return ChatCompletionChunk(
            id=f"chatcmpl-{self.job_id}", created=self.created_s, model=self.model, choices=choices,
            usage=usage,
        )  # fmt: skip

    def delta(self, text: str, index: int = 0, logprobs: Sequence[Any] = ()) -> str:
        """A chunk of one choice's new text (and its tokens' log-probabilities, when asked for)."""
        if self.kind == "completion":
            offset = self._offsets.get(index, 0)
            self._offsets[index] = offset + sum(len(entry["token"]) for entry in logprobs)
            body = completion_logprobs(logprobs, offset) if self.shape.logprobs else None
            return sse(
                self._chunk(
                    [CompletionChunkChoice(index=index, text=text, finish_reason=None, logprobs=body)]
                )
            )
        if self.shape.tool_mode == "required":
            self._held.setdefault(index, []).append(text)
            return ""
        role: Literal["assistant"] | None = None if index in self._started else "assistant"
        if self.shape.tool_mode == "named":
            first = index not in self._started
            call = ToolCallDelta(
                index=0, id=call_id(self.job_id, index) if first else None,
                type="function" if first else None,
                function=FunctionCallDelta(name=self.shape.tool if first else None, arguments=text),
            )  # fmt: skip
            delta = Delta(role=role, tool_calls=[call])
        else:
            delta = Delta(role=role, content=text)
        self._started.add(index)
        chat_logprobs_body = ChatLogprobs(content=chat_logprobs(logprobs)) if self.shape.logprobs else None
        return sse(
            self._chunk(
                [ChatChunkChoice(index=index, delta=delta, finish_reason=None, logprobs=chat_logprobs_body)]
            )
        )

    def end(self, finish_reasons: Sequence[str], usage: Usage) -> str:
        """Each choice's finish reason, the usage when asked, and [DONE], for a job that completed."""
        events = []
        for index in range(self.shape.n):
            engine_finish = finish_reasons[index] if index < len(finish_reasons) else ""
            finish: FinishReason = "length" if engine_finish == "length" else "stop"
            if self.kind == "completion":
                events.append(
                    sse(self._chunk([CompletionChunkChoice(index=index, text="", finish_reason=finish)]))
                )
                continue
            if finish == "stop" and self.shape.tool_mode:
                events.append(self._held_call(index))
                finish = "tool_calls"
            events.append(
                sse(self._chunk([ChatChunkChoice(index=index, delta=Delta(), finish_reason=finish)]))
            )
        if self.include_usage:
            events.append(sse(self._chunk([], usage)))
        events.append(DONE)
        return "".join(events)

    def finish(self, end: tokens.End) -> str:
        """`end` of a job that completed, as its token stream closes it."""
        return self.end(end.finish_reasons or (end.finish_reason,), usage_of(end))

    def error(self, problem: Problem) -> str:
        return error_event(problem)

    def _held_call(self, index: int) -> str:
        """A required call's delta, once its JSON is whole."""
        if self.shape.tool_mode != "required":
            return ""
        call = tool_call(
            self.shape,
            "".join(self._held.get(index, [])),
            call_id(self.job_id, index),
        )
        if call is None:
            return ""
        function = FunctionCallDelta(name=call.function.name, arguments=call.function.arguments)
        delta = Delta(
            role="assistant",
            tool_calls=[ToolCallDelta(index=0, id=call.id, type="function", function=function)],
        )
        return sse(self._chunk([ChatChunkChoice(index=index, delta=delta, finish_reason=None)]))


def usage_of(end: tokens.End) -> Usage:
    return Usage(
        prompt_tokens=end.prompt_tokens,
        completion_tokens=end.completion_tokens,
        total_tokens=end.prompt_tokens + end.completion_tokens,
    )
