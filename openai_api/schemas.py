"""Request bodies of the OpenAI-compatible `/v1` routes, in OpenAI's field names.

Requests list the options OpenAI clients commonly send. An option Synapse cannot honour is typed so
that only its neutral value validates (`best_of` can only be 1): the spec says so, and a request that
sets it gets a 400 naming it with the reason in `UNSUPPORTED`, instead of being silently dropped. Any
other field is refused as unknown. The answers' bodies are in openai_api/answer_schemas.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, model_validator

from contract.engine_limits import MAX_CHOICES
from openai_api.embedding_schemas import DIMENSIONS_UNSUPPORTED
from openai_api.sampling import (
    LOGIT_BIAS_DESCRIPTION,
    PENALTY_DESCRIPTION,
    TOP_LOGPROBS_DESCRIPTION,
    JsonInt,
    LogitBias,
    MaxTokens,
    Penalty,
    Sampling,
    Seed,
    StopSequences,
    StopText,
    Temperature,
    TopK,
    TopLogprobs,
    TopP,
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
OnlyOne = Annotated[Literal[1], BeforeValidator(_no_bool)]
Choices = Annotated[JsonInt, Field(ge=1, le=MAX_CHOICES)]
CompletionLogprobs = Annotated[JsonInt, Field(ge=0, le=5)]  # OpenAI's limit on the legacy completions API
OnlyFalse = Annotated[Literal[False], BeforeValidator(_only_bool)]

# Why each option is limited to its neutral value; the 400 for a request that sets another says this.
UNSUPPORTED = {
    "best_of": "only best_of=1 is supported",
    "echo": "echo is not supported",
    "suffix": "suffix (insertion) is not supported",
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
    n: Choices | None = Field(None, description=f"choices to generate, 1 to {MAX_CHOICES}; default 1")
    stop: StopText | StopSequences | None = Field(
        None, description="up to 4 strings; the text ends before the first one produced"
    )
    presence_penalty: Penalty | None = Field(None, description=PENALTY_DESCRIPTION.format("once"))
    frequency_penalty: Penalty | None = Field(None, description=PENALTY_DESCRIPTION.format("by how often"))
    logit_bias: LogitBias | None = Field(None, description=LOGIT_BIAS_DESCRIPTION)
    seed: Seed | None = Field(None, description="the same seed and input give the same text")
    user: str | None = Field(None, max_length=256, description="an end-user id, for your own records")

    def sampling(self) -> Sampling:
        """The sampling options, as the job route takes them."""
        return Sampling(
            temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, seed=self.seed, stop=self.stop,
            n=self.n, presence_penalty=self.presence_penalty, frequency_penalty=self.frequency_penalty,
            logit_bias=self.logit_bias, logprobs=self.top_logprob_count(), structured_outputs=None,
        )  # fmt: skip

    def top_logprob_count(self) -> int | None:
        """How many likeliest tokens to list per position; None: no log-probabilities at all."""
        return None


class CompletionRequest(_Options):
    """`POST /v1/completions` body."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"model": "gpu-sim", "prompt": "The three", "max_tokens": 16}]}
    )

    prompt: NonEmptyText = Field(description="text to complete")
    max_tokens: MaxTokens | None = Field(None, description="tokens to generate; default 16")
    echo: OnlyFalse | None = Field(None, description=UNSUPPORTED["echo"])
    best_of: OnlyOne | None = Field(None, description=UNSUPPORTED["best_of"])
    logprobs: CompletionLogprobs | None = Field(
        None, description="log-probabilities of each token and of the k likeliest (0 to 5)"
    )
    suffix: None = Field(None, description=UNSUPPORTED["suffix"])

    def top_logprob_count(self) -> int | None:
        return self.logprobs


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str


FunctionName = Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]


class FunctionCall(BaseModel):
    name: FunctionName
    arguments: str = Field(description="the arguments, a JSON object as text")


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: NonEmptyText | Annotated[list[TextPart], Field(min_length=1)] | None = None
    name: str | None = Field(None, max_length=64)
    tool_calls: Annotated[list[ToolCall], Field(min_length=1)] | None = Field(
        None, description="an assistant's calls, as an earlier answer gave them"
    )
    tool_call_id: str | None = Field(None, max_length=256, description="a tool message: the call it answers")

    @model_validator(mode="after")
    def _content_or_calls(self) -> ChatMessage:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("content is required, except for an assistant message with tool_calls")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only an assistant message has tool_calls")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ValueError("a tool message, and only one, names the tool_call_id it answers")
        return self


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: FunctionName
    description: str | None = Field(None, max_length=4096)
    parameters: dict[str, object] = Field(
        default_factory=lambda: dict[str, object](type="object", properties={}),
        description="a JSON schema of the arguments",
    )
    strict: StrictBool | None = Field(None, description="the arguments always validate (they do here)")


class Tool(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: FunctionName


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]
    description: str | None = Field(None, max_length=4096)
    schema_: dict[str, object] = Field(
        default_factory=dict, alias="schema", description="the JSON schema the answer validates against"
    )
    strict: StrictBool | None = Field(None, description="the answer always validates (it does here)")


class ResponseFormat(BaseModel):
    """OpenAI's `response_format`: plain text, any JSON object, or JSON that validates against a schema;
    JSON is enforced by constrained decoding, token by token."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("json_schema is required with type json_schema, and only with it")
        return self


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
    logprobs: StrictBool | None = Field(None, description="return each token's log-probability")
    top_logprobs: TopLogprobs | None = Field(None, description=TOP_LOGPROBS_DESCRIPTION)
    response_format: ResponseFormat | None = None
    tools: Annotated[list[Tool], Field(min_length=1, max_length=128)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        None,
        description="auto (the default with tools): text or calls; required: calls; a named function: one "
        "call of it; none: text. Calls' arguments always validate against their function's parameters",
    )
    parallel_tool_calls: StrictBool | None = Field(
        None, description="false: the answer holds one call at most"
    )

    @model_validator(mode="after")
    def _logprobs_for_top_logprobs(self) -> ChatCompletionRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        return self

    def top_logprob_count(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None
