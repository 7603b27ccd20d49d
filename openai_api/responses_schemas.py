"""Request and answer bodies of OpenAI's Responses API (`/v1/responses`), in OpenAI's field names.

A response runs as a chat (openai_api/responses_format.py translates both ways), so a request takes what a
chat honours: messages, function calls and their outputs, function tools, a text or JSON answer. An option
OpenAI defines that Synapse cannot honour validates only at its neutral value (null, or the value that
asks for nothing), and any other value is refused naming the field, with the reason in `UNSUPPORTED`; a
field OpenAI does not define is refused as unknown. What the OpenAI Agents SDK sends by default validates.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    Tag,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
)
from pydantic_core import PydanticCustomError

from openai_api.batch_schemas import InputTokensDetails, OutputTokensDetails
from openai_api.sampling import JsonInt, MaxTokens, Temperature, TopP
from openai_api.schemas import (
    FunctionDefinition,
    FunctionName,
    JsonSchemaFormat,
    ModelName,
    NonEmptyText,
    OnlyFalse,
)

MAX_INPUT_ITEMS = 2048
MAX_CONTENT_PARTS = 256
MAX_TOOLS = 128  # as many as a chat takes
MAX_METADATA_PAIRS = 16  # OpenAI's limits on metadata
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
MAX_LISTED_ITEMS = 100  # a page of input items, at most (OpenAI's)
DEFAULT_LISTED_ITEMS = 20

# Why each option validates only at its neutral value; the 400 for a request that sets another says this.
UNSUPPORTED = {
    "conversation": "conversation objects are not supported: chain responses with previous_response_id",
    "include": "include is not supported: an answer here has no extra data to include",
    "max_tool_calls": "max_tool_calls limits built-in tools, and there are none here",
    "prompt": "stored prompt templates are not supported: send instructions and input",
    "prompt_cache_retention": "the prompt cache's retention is not configurable here",
    "reasoning": "reasoning options are not supported: the models here have no separate reasoning",
    "service_tier": "only the default service tier exists here",
    "stream_options": "stream obfuscation is not supported",
    "top_logprobs": "log-probabilities are not supported on /v1/responses",
    "truncation": 'only truncation "disabled": an input past the model\'s context is refused, not cut',
    "context_management": "context management (compaction) is not supported",
    "verbosity": "verbosity is not supported: the answer's length follows the model and max_output_tokens",
}


def neutral_only(field: str) -> WrapValidator:
    """Validates a field whose type admits only its neutral values; any other value is refused with the
    field's reason in `UNSUPPORTED` (placed outside a union, so the 400 says that and not each member)."""

    def check(value: object, handler: ValidatorFunctionWrapHandler) -> object:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("unsupported_parameter", UNSUPPORTED[field]) from None

    return WrapValidator(check)


def _unsupported(field: str) -> Any:
    return Field(default=None, description=UNSUPPORTED[field])


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


ItemId = Annotated[str, Field(min_length=1, max_length=256)]
CallId = Annotated[str, Field(min_length=1, max_length=256)]  # a chat's tool_call_id takes as many
ItemStatus = Literal["in_progress", "completed", "incomplete"]
NotRead = Annotated[list[dict[str, object]], Field(max_length=MAX_CONTENT_PARTS)]


class InputTextPart(_Body):
    type: Literal["input_text"]
    text: str


class OutputTextPart(_Body):
    """An earlier answer's text, as a client replays it; its annotations and log-probabilities are the
    earlier answer's and are not read."""

    type: Literal["output_text"]
    text: str
    annotations: NotRead | None = None
    logprobs: NotRead | None = None


def _type_of(value: object) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if isinstance(kind, str) else None


TextPart = Annotated[
    Annotated[InputTextPart, Tag("input_text")] | Annotated[OutputTextPart, Tag("output_text")],
    Discriminator(
        _type_of,
        custom_error_type="unsupported_content",
        custom_error_message="a part is input_text or output_text: images and files are not supported",
    ),
]


def _content_kind(value: object) -> str:
    return "parts" if isinstance(value, list) else "text"


# Tagged, so that a 400 names what is wrong with the content as sent, not with each way it may be written.
Content = Annotated[
    Annotated[NonEmptyText, Tag("text")]
    | Annotated[list[TextPart], Field(min_length=1, max_length=MAX_CONTENT_PARTS), Tag("parts")],
    Discriminator(_content_kind),
]


class MessageInput(_Body):
    """A message of the conversation; `type` may be left out, as OpenAI's "easy" input message does."""

    type: Literal["message"] | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: Content
    id: ItemId | None = None
    status: ItemStatus | None = None
    phase: Literal["commentary", "final_answer"] | None = Field(None, description="not read")


class FunctionCallInput(_Body):
    """A call an earlier answer made, replayed by the client."""

    type: Literal["function_call"]
    call_id: CallId
    name: FunctionName
    arguments: str = Field(description="the arguments, a JSON object as text")
    id: ItemId | None = None
    status: ItemStatus | None = None


class FunctionCallOutputInput(_Body):
    """What the client's function returned for a call."""

    type: Literal["function_call_output"]
    call_id: CallId
    output: str | Annotated[list[InputTextPart], Field(min_length=1, max_length=MAX_CONTENT_PARTS)]
    id: ItemId | None = None
    status: ItemStatus | None = None


def _item_kind(value: object) -> str:
    return _type_of(value) or "message"


InputItem = Annotated[
    Annotated[MessageInput, Tag("message")]
    | Annotated[FunctionCallInput, Tag("function_call")]
    | Annotated[FunctionCallOutputInput, Tag("function_call_output")],
    Discriminator(
        _item_kind,
        custom_error_type="invalid_item",
        custom_error_message="an item is a message, a function_call or a function_call_output",
    ),
]


class FunctionTool(FunctionDefinition):
    """Responses' function tool: a chat's function definition, flat, beside its `type`."""

    type: Literal["function"]


class FunctionToolChoice(_Body):
    type: Literal["function"]
    name: FunctionName


class PlainTextFormat(_Body):
    type: Literal["text"]


class JsonObjectFormat(_Body):
    type: Literal["json_object"]


class JsonSchemaTextFormat(JsonSchemaFormat):
    """A chat's `json_schema`, flat, beside its `type`."""

    # The `schema` key is `schema_` in Python: a plain dump keeps OpenAI's name, so that a stored request
    # reads back and an echo is what the client sent.
    model_config = ConfigDict(serialize_by_alias=True)

    type: Literal["json_schema"]


TextFormat = Annotated[PlainTextFormat | JsonObjectFormat | JsonSchemaTextFormat, Field(discriminator="type")]


class TextConfig(_Body):
    format: TextFormat | None = None
    verbosity: Annotated[None, neutral_only("verbosity")] = _unsupported("verbosity")


class StreamOptions(_Body):
    include_obfuscation: OnlyFalse | None = None


MetadataKey = Annotated[str, Field(max_length=MAX_METADATA_KEY_CHARS)]
MetadataValue = Annotated[str, Field(max_length=MAX_METADATA_VALUE_CHARS)]
Metadata = Annotated[dict[MetadataKey, MetadataValue], Field(max_length=MAX_METADATA_PAIRS)]
ToolChoice = Literal["none", "auto", "required"] | FunctionToolChoice


def _one_user_message(value: object) -> object:
    """A text input is OpenAI's shorthand for one user message: read as that, so that the 400 for any
    input names the item at fault rather than each way an input may be written."""
    return [{"role": "user", "content": value}] if isinstance(value, str) else value


ItemList = Annotated[list[InputItem], Field(min_length=1, max_length=MAX_INPUT_ITEMS)]
Items = Annotated[
    ItemList, BeforeValidator(_one_user_message, json_schema_input_type=NonEmptyText | ItemList)
]


class ResponseRequest(_Body):
    """`POST /v1/responses` body."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"model": "gpu-sim", "input": "Name three colours."}]}
    )

    model: ModelName
    input: Items = Field(description="a user message, or items: messages, function calls and their outputs")
    instructions: str | None = Field(None, description="a leading system message; not carried to the next")
    max_output_tokens: MaxTokens | None = Field(None, description="tokens to generate, at most")
    temperature: Temperature | None = Field(None, description="0 is greedy; default 1")
    top_p: TopP | None = Field(None, description="nucleus sampling; default 1")
    text: TextConfig | None = Field(None, description="plain text, any JSON object, or JSON to a schema")
    tools: Annotated[list[FunctionTool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: ToolChoice | None = Field(None, description="none, auto, required, or one function")
    parallel_tool_calls: StrictBool | None = Field(
        None, description="false: the answer holds one call at most"
    )
    previous_response_id: Annotated[str, Field(max_length=256)] | None = Field(
        None, description="continue that response's conversation"
    )
    metadata: Metadata | None = Field(None, description="up to 16 pairs for your own records")
    store: StrictBool | None = Field(True, description="keep the response, to read or continue later")
    stream: StrictBool | None = Field(False, description="answer as Server-Sent Events")
    background: StrictBool | None = Field(False, description="answer at once; read the response later")
    user: str | None = Field(None, max_length=256, description="an end-user id, for your own records")
    safety_identifier: str | None = Field(None, max_length=128, description="an end-user id; not read")
    prompt_cache_key: str | None = Field(None, max_length=256, description="a caching hint; not read")

    conversation: Annotated[None, neutral_only("conversation")] = _unsupported("conversation")
    include: Annotated[Annotated[list[str], Field(max_length=0)] | None, neutral_only("include")] = (
        _unsupported("include")
    )
    max_tool_calls: Annotated[None, neutral_only("max_tool_calls")] = _unsupported("max_tool_calls")
    prompt: Annotated[None, neutral_only("prompt")] = _unsupported("prompt")
    prompt_cache_retention: Annotated[None, neutral_only("prompt_cache_retention")] = _unsupported(
        "prompt_cache_retention"
    )
    reasoning: Annotated[
        Annotated[dict[str, None], Field(max_length=8)] | None, neutral_only("reasoning")
    ] = _unsupported("reasoning")
    service_tier: Annotated[Literal["auto", "default"] | None, neutral_only("service_tier")] = _unsupported(
        "service_tier"
    )
    stream_options: Annotated[StreamOptions | None, neutral_only("stream_options")] = _unsupported(
        "stream_options"
    )
    top_logprobs: Annotated[Annotated[JsonInt, Field(ge=0, le=0)] | None, neutral_only("top_logprobs")] = (
        _unsupported("top_logprobs")
    )
    truncation: Annotated[Literal["disabled"] | None, neutral_only("truncation")] = _unsupported("truncation")
    context_management: Annotated[
        Annotated[list[object], Field(max_length=0)] | None, neutral_only("context_management")
    ] = _unsupported("context_management")

    @field_validator("background")
    @classmethod
    def _background_is_stored(cls, background: bool | None, info: ValidationInfo) -> bool | None:
        if background and info.data.get("store") is False:
            raise PydanticCustomError("invalid_request", "background needs store: true, to read it later")
        return background

    def stores(self) -> bool:
        return self.store is not False

    def in_background(self) -> bool:
        return self.background is True


class InputItemsQuery(_Body):
    """`GET /v1/responses/{id}/input_items` query: a page of the request's input items."""

    after: ItemId | None = Field(None, description="list the items after this one")
    limit: Annotated[int, Field(ge=1, le=MAX_LISTED_ITEMS)] = DEFAULT_LISTED_ITEMS
    order: Literal["asc", "desc"] = Field("desc", description="desc: the newest first")
    include: Annotated[Annotated[list[str], Field(max_length=0)] | None, neutral_only("include")] = (
        _unsupported("include")
    )


# The answers. `output_text` is not a field: OpenAI's SDKs compute it from the output.

ResponseStatus = Literal["queued", "in_progress", "completed", "failed", "cancelled", "incomplete"]
# The codes OpenAI's SDKs accept on a response's error: a job's own code is mapped onto them.
ResponseErrorCode = Literal["server_error", "invalid_prompt"]


class OutputText(BaseModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[object] = Field(default_factory=list)


class OutputMessage(BaseModel):
    type: Literal["message"] = "message"
    id: str
    status: ItemStatus
    role: Literal["assistant"] = "assistant"
    content: list[OutputText]


class FunctionCallItem(BaseModel):
    type: Literal["function_call"] = "function_call"
    id: str
    call_id: str
    name: str
    arguments: str
    status: ItemStatus


class InputText(BaseModel):
    type: Literal["input_text"] = "input_text"
    text: str


class InputMessageItem(BaseModel):
    type: Literal["message"] = "message"
    id: str
    role: Literal["user", "system", "developer"]
    content: list[InputText]
    status: ItemStatus


class FunctionCallOutputItem(BaseModel):
    type: Literal["function_call_output"] = "function_call_output"
    id: str
    call_id: str
    output: str | list[InputText]
    status: ItemStatus


OutputItem = OutputMessage | FunctionCallItem
ListedItem = InputMessageItem | OutputMessage | FunctionCallItem | FunctionCallOutputItem


class ResponseInputTokensDetails(InputTokensDetails):
    cache_write_tokens: int = 0  # OpenAI's SDKs require it


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: ResponseInputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseError(BaseModel):
    code: ResponseErrorCode
    message: str


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens"]


class ResponseObject(BaseModel):
    """A response: its output once completed, and the request's options echoed, as OpenAI's is."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    model: str
    output: list[OutputItem]
    usage: ResponseUsage | None
    error: ResponseError | None
    incomplete_details: IncompleteDetails | None
    instructions: str | None
    max_output_tokens: int | None
    metadata: dict[str, str]
    parallel_tool_calls: bool
    previous_response_id: str | None
    temperature: float | None
    top_p: float | None
    text: TextConfig
    tool_choice: ToolChoice
    tools: list[FunctionTool]
    truncation: Literal["disabled"] = "disabled"
    background: bool
    store: bool
    user: str | None


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response"] = "response"
    deleted: Literal[True] = True


class InputItemList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ListedItem]
    first_id: str | None
    last_id: str | None
    has_more: bool
