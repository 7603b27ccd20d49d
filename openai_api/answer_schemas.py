"""Answer bodies of the OpenAI-compatible `/v1` routes, in OpenAI's field names: the answers are built
from these models, so they match the spec (openai_api/format.py builds them from a finished job)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from openai_api.sampling import Usage
from openai_api.schemas import ToolCall

FinishReason = Literal["stop", "length", "tool_calls"]


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob] | None


class CompletionLogprobsBody(BaseModel):
    """The legacy completions API's shape: parallel lists, a dict of the likeliest per position."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: FinishReason
    logprobs: CompletionLogprobsBody | None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCall] | None = Field(default=None, exclude_if=lambda v: v is None)


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: FinishReason
    logprobs: ChatLogprobs | None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class CompletionChunkChoice(BaseModel):
    index: int
    text: str
    finish_reason: FinishReason | None
    logprobs: CompletionLogprobsBody | None = None


class CompletionChunk(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChunkChoice]
    usage: Usage | None = None


class FunctionCallDelta(BaseModel):
    name: str | None = Field(default=None, exclude_if=lambda v: v is None)
    arguments: str


class ToolCallDelta(BaseModel):
    """A streamed call: its first delta names it (id, type, name), later ones add to its arguments."""

    index: int
    id: str | None = Field(default=None, exclude_if=lambda v: v is None)
    type: Literal["function"] | None = Field(default=None, exclude_if=lambda v: v is None)
    function: FunctionCallDelta


class Delta(BaseModel):
    """What a chunk adds; the last chunk's delta is `{}`, as OpenAI's is."""

    role: Literal["assistant"] | None = Field(default=None, exclude_if=lambda v: v is None)
    content: str | None = Field(default=None, exclude_if=lambda v: v is None)
    tool_calls: list[ToolCallDelta] | None = Field(default=None, exclude_if=lambda v: v is None)


class ChatChunkChoice(BaseModel):
    index: int
    delta: Delta
    finish_reason: FinishReason | None
    logprobs: ChatLogprobs | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None
    jobId: str | None = Field(None, description="on 504: fetch the answer from /results/{jobId}")  # noqa: N815


class OpenAIErrorBody(BaseModel):
    """Every error of the `/v1` routes, in OpenAI's shape."""

    error: OpenAIErrorDetail
