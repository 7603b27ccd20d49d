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
from openai_api.format import Shape, call_id, chat_logprobs, completion_logprobs
from openai_api.sampling import Usage
from openai_api.tools import CallOpened, CallReader, TextPiece, ToolEvent

DONE = "data: [DONE]\n\n"


def sse(chunk: BaseModel) -> str:
    return f"data: {chunk.model_dump_json(exclude_none=False)}\n\n"


def error_event(problem: Problem) -> str:
    return f"data: {dumps(openai_body(problem))}\n\n"


@dataclass(slots=True)
class ChunkFraming:
    """The chunks of one streamed completion (`kind` "completion") or chat completion ("chat"), of
    `shape.n` choices. A tool-using answer is read as it comes (`openai_api.tools.CallReader`): its text
    goes out as content, its calls as `tool_calls` deltas (the id and name first, then the arguments in
    fragments), as OpenAI sends them."""

    kind: Literal["chat", "completion"]
    job_id: str
    model: str
    created_s: int
    include_usage: bool
    shape: Shape = field(default_factory=Shape)
    _started: set[int] = field(default_factory=set)
    _readers: dict[int, CallReader] = field(default_factory=dict)  # a tool-using answer's, per choice
    _opened: dict[int, int] = field(default_factory=dict)  # calls opened, per choice
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
        if self.shape.tools is None:
            return self._chat_chunk(index, Delta(content=text), logprobs)
        events = self._readers.setdefault(index, CallReader()).feed(text)
        deltas = [self._tool_delta(index, event) for event in events]
        if not deltas and self.shape.logprobs:
            deltas = [Delta()]  # the tokens' log-probabilities go out as they come
        return "".join(self._chat_chunk(index, d, logprobs if i == 0 else ()) for i, d in enumerate(deltas))

    def _chat_chunk(self, index: int, delta: Delta, logprobs: Sequence[Any]) -> str:
        if index not in self._started:
            delta.role = "assistant"
            self._started.add(index)
        chat_logprobs_body = ChatLogprobs(content=chat_logprobs(logprobs)) if self.shape.logprobs else None
        return sse(
            self._chunk(
                [ChatChunkChoice(index=index, delta=delta, finish_reason=None, logprobs=chat_logprobs_body)]
            )
        )

    def _tool_delta(self, index: int, event: ToolEvent) -> Delta:
        if isinstance(event, TextPiece):
            return Delta(content=event.text)
        if isinstance(event, CallOpened):
            self._opened[index] = event.index + 1
            function = FunctionCallDelta(name=event.name, arguments="")
            call = ToolCallDelta(
                index=event.index,
                id=call_id(self.job_id, index, event.index),
                type="function",
                function=function,
            )
            return Delta(tool_calls=[call])
        function = FunctionCallDelta(arguments=event.text)
        return Delta(tool_calls=[ToolCallDelta(index=event.index, function=function)])

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
            if self.shape.tools is not None:
                events.append(self._held(index))
                called = self._opened.get(index, 0) > 0 or self.shape.tools.mode == "required"
                finish = "tool_calls" if called and finish == "stop" else finish
            events.append(
                sse(self._chunk([ChatChunkChoice(index=index, delta=Delta(), finish_reason=finish)]))
            )
        if self.include_usage:
            events.append(sse(self._chunk([], usage)))
        events.append(DONE)
        return "".join(events)

    def _held(self, index: int) -> str:
        """What a choice's reader still held at its end: text that looked like a call's beginning, or,
        for a named choice cut before its call began, that call with no arguments."""
        assert self.shape.tools is not None
        events = self._readers.setdefault(index, CallReader()).close()
        if self.shape.tools.mode == "named" and not self._opened.get(index):
            events.append(CallOpened(0, self.shape.tools.name))
        return "".join(self._chat_chunk(index, self._tool_delta(index, e), ()) for e in events)

    def finish(self, end: tokens.End) -> str:
        """`end` of a job that completed, as its token stream closes it."""
        return self.end(end.finish_reasons or (end.finish_reason,), usage_of(end))

    def error(self, problem: Problem) -> str:
        return error_event(problem)


def usage_of(end: tokens.End) -> Usage:
    return Usage(
        prompt_tokens=end.prompt_tokens,
        completion_tokens=end.completion_tokens,
        total_tokens=end.prompt_tokens + end.completion_tokens,
    )
