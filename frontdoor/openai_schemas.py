"""Bodies of the OpenAI-compatible `/v1` routes, in OpenAI's field names.

Requests list the options OpenAI clients commonly send. An option Synapse cannot honour is typed so
that only its neutral value validates (`n` can only be 1): the spec says so, and a request that sets
it gets a 400 naming it with the reason in `UNSUPPORTED`, instead of being silently dropped. Any
other field is refused as unknown. Responses are built from these models, so they match the spec.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, StrictBool

from frontdoor.embedding_schemas import DIMENSIONS_UNSUPPORTED
from frontdoor.schemas import (
    MaxTokens,
    Sampling,
    Seed,
    StopSequences,
    StopText,
    Temperature,
    TopK,
    TopP,
    Usage,
)


def _no_bool(value: object) -> object:
    """A Literal compares by equality, and True == 1: JSON's true is not the number 1."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


def _only_bool(value: object) -> object:
    """A Literal compares by equality, and 0 == False: JSON's 0 is not false."""
    if not isinstance(value, bool):
        raise ValueError("must be a boolean")
    return value


NonEmptyText = Annotated[str, Field(min_length=1)]
ModelName = Annotated[str, Field(min_length=1, max_length=128, description="a model from GET /v1/models")]
# Numbers and booleans are strict: JSON's types as the spec names them, not "0.5" for 0.5 nor 1 for true.
OnlyZero = Annotated[float, Strict(), Field(ge=0, le=0)]
OnlyOne = Annotated[Literal[1], BeforeValidator(_no_bool)]
OnlyFalse = Annotated[Literal[False], BeforeValidator(_only_bool)]

# Why each option is limited to its neutral value; the 400 for a request that sets another says this.
UNSUPPORTED = {
    "n": "only n=1 is supported; send one request per completion",
    "best_of": "only best_of=1 is supported",
    "echo": "echo is not supported",
    "suffix": "suffix (insertion) is not supported",
    "logprobs": "logprobs are not supported",
    "top_logprobs": "logprobs are not supported",
    "presence_penalty": "only presence_penalty=0 is supported",
    "frequency_penalty": "only frequency_penalty=0 is supported",
    "logit_bias": "logit_bias is not supported",
    "dimensions": DIMENSIONS_UNSUPPORTED,
}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: StrictBool | None = Field(None, description="send a last chunk with the token counts")


class _Options(BaseModel):
    """Options both request kinds share."""

    model_config = ConfigDict(extra="forbid")

    model: ModelName
    stream: StrictBool | None = Field(False, description="answer as Server-Sent Events")
    stream_options: StreamOptions | None = None
    temperature: Temperature | None = Field(None, description="0 is greedy; default 1")
    top_p: TopP | None = Field(None, description="nucleus sampling; default 1")
    top_k: TopK | None = Field(None, description="vLLM's extension: sample among the k likeliest tokens")
    n: OnlyOne | None = Field(None, description=UNSUPPORTED["n"])
    stop: StopText | StopSequences | None = Field(
        None, description="up to 4 strings; the text ends before the first one produced"
    )
    presence_penalty: OnlyZero | None = Field(None, description=UNSUPPORTED["presence_penalty"])
    frequency_penalty: OnlyZero | None = Field(None, description=UNSUPPORTED["frequency_penalty"])
    logit_bias: Annotated[dict[str, float], Field(max_length=0)] | None = Field(
        None, description=UNSUPPORTED["logit_bias"]
    )
    seed: Seed | None = Field(None, description="the same seed and input give the same text")
    user: str | None = Field(None, max_length=256, description="an end-user id, for your own records")

    def sampling(self) -> Sampling:
        """The sampling options, as the job route takes them."""
        return Sampling(
            temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, seed=self.seed, stop=self.stop
        )


class CompletionRequest(_Options):
    """`POST /v1/completions` body."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"model": "gpu-sim", "prompt": "The three", "max_tokens": 16}]}
    )

    prompt: NonEmptyText = Field(description="text to complete")
    max_tokens: MaxTokens | None = Field(None, description="tokens to generate; default 16")
    echo: OnlyFalse | None = Field(None, description=UNSUPPORTED["echo"])
    best_of: OnlyOne | None = Field(None, description=UNSUPPORTED["best_of"])
    logprobs: None = Field(None, description=UNSUPPORTED["logprobs"])
    suffix: None = Field(None, description=UNSUPPORTED["suffix"])


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant"]
    content: NonEmptyText | Annotated[list[TextPart], Field(min_length=1)]
    name: str | None = Field(None, max_length=64)


class ChatCompletionRequest(_Options):
    """`POST /v1/chat/completions` body."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"model": "gpu-sim", "messages": [{"role": "user", "content": "Name three colours."}]}
            ]
        }
    )

    messages: list[ChatMessage] = Field(min_length=1, description="the conversation so far")
    max_tokens: MaxTokens | None = Field(None, description="tokens to generate; default 16")
    max_completion_tokens: MaxTokens | None = Field(None, description="wins over max_tokens")
    logprobs: OnlyFalse | None = Field(None, description=UNSUPPORTED["logprobs"])
    top_logprobs: None = Field(None, description=UNSUPPORTED["top_logprobs"])


FinishReason = Literal["stop", "length"]


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: FinishReason
    logprobs: None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: FinishReason
    logprobs: None = None


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
    logprobs: None = None


class CompletionChunk(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChunkChoice]
    usage: Usage | None = None


class Delta(BaseModel):
    """What a chunk adds; the last chunk's delta is `{}`, as OpenAI's is."""

    role: Literal["assistant"] | None = Field(default=None, exclude_if=lambda v: v is None)
    content: str | None = Field(default=None, exclude_if=lambda v: v is None)


class ChatChunkChoice(BaseModel):
    index: int
    delta: Delta
    finish_reason: FinishReason | None
    logprobs: None = None


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
