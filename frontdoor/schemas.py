"""Request and response bodies of the public API; pydantic because this is where untrusted data enters."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, StrictBool, model_validator

from contract.embeddings import EncodingFormat
from contract.jobs import Sampling as JobSampling
from frontdoor.embedding_schemas import (
    ENCODING_DESCRIPTION,
    TRUNCATE_DESCRIPTION,
    EmbeddingInput,
    EmbeddingResult,
)

# The longest deadline a job may ask for: SageMaker asynchronous inference's longest, an hour
# (InvokeEndpointAsync's InvocationTimeoutSeconds is at most 3,600 s: docs.aws.amazon.com/sagemaker/
# latest/dg/async-inference-invoke-endpoint.html).
MAX_TIMEOUT_MS = 3_600_000
# A job that names no deadline outlives a cold start from zero with margin: `synapse plan cold-start`
# puts its worst case (a cold instance that pulls the image) near 9 min; tests/unit/test_cold_start.py
# fails if the planner's defaults ever pass this less its margin.
DEFAULT_TIMEOUT_MS = 900_000
IDEMPOTENCY_KEY_MAX = 255
# Far past any valid prompt (at most SYNAPSE_MAX_PROMPT_CHARS), under Lambda's 6 MB payload; it is also
# the bound on an embedding request's texts together (up to 1,024 of SYNAPSE_MAX_PROMPT_CHARS each).
MAX_BODY_BYTES = 4 * 1024 * 1024
# A valid body nests 5 deep (a chat's content parts); json.loads recurses once per level.
MAX_JSON_DEPTH = 64


def _json_integer(value: object) -> object:
    """An integer as JSON Schema has it: a number with no fractional part (16 or 16.0), never a string
    ("16") nor a boolean (true, which Python counts as 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be an integer")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError("must be an integer, with no fractional part")
    return int(value)


JsonInt = Annotated[int, BeforeValidator(_json_integer)]
# Constraints first, so that the JSON schema states them (minimum, maximum) for the integer itself.
MaxTokens = Annotated[int, Field(ge=1, le=4096), BeforeValidator(_json_integer)]
TimeoutMs = Annotated[int, Field(ge=100, le=MAX_TIMEOUT_MS), BeforeValidator(_json_integer)]


# A job's record outlives its end by ttl seconds: at least a minute, to be read at all; at most the
# platform's SYNAPSE_JOB_TTL_S (checked per request: the setting may lower it).
MIN_TTL_S = 60
MAX_TTL_S = 7 * 86_400
TtlSeconds = Annotated[int, Field(ge=MIN_TTL_S, le=MAX_TTL_S), BeforeValidator(_json_integer)]
MAX_CALLBACK_CHARS = 2048
CallbackUrl = Annotated[
    str, Field(min_length=8, max_length=MAX_CALLBACK_CHARS, pattern=r"^https?://[^\s/$.?#][^\s]*$")
]

MAX_STOP_SEQUENCES = 4
Temperature = Annotated[float, Strict(), Field(ge=0, le=2)]
TopP = Annotated[float, Strict(), Field(gt=0, le=1)]
TopK = Annotated[int, Field(ge=0, le=1000), BeforeValidator(_json_integer)]
# Bounds a JSON number (a double) holds exactly, so a schema's check and ours agree on the edge.
Seed = Annotated[int, Field(ge=0, le=2**32 - 1), BeforeValidator(_json_integer)]
StopText = Annotated[str, Field(min_length=1, max_length=256)]
StopSequences = Annotated[list[StopText], Field(max_length=MAX_STOP_SEQUENCES)]


MAX_CHOICES = 16  # choices of one request: the engine's limit (triton_backends/synapse_llm: MAX_N)
Penalty = Annotated[float, Strict(), Field(ge=-2, le=2)]
LogitBias = Annotated[
    dict[Annotated[str, Field(pattern=r"^[0-9]{1,9}$")], Annotated[float, Strict(), Field(ge=-100, le=100)]],
    Field(max_length=300),
]
TopLogprobs = Annotated[int, Field(ge=0, le=20), BeforeValidator(_json_integer)]
PENALTY_DESCRIPTION = "-2 to 2; lowers (or raises) tokens the answer has used at all ({})"
LOGIT_BIAS_DESCRIPTION = "token id (a string of digits) to a bias from -100 to 100, added to its logit"


class StructuredOutputs(BaseModel):
    """vLLM's `structured_outputs`: the text is constrained to a JSON schema, or to any JSON object."""

    model_config = ConfigDict(extra="forbid")

    json_schema: dict[str, object] | None = Field(
        None, alias="json", description="a JSON schema the text must validate against"
    )
    json_object: Literal[True] | None = Field(None, description="the text is a JSON object")

    @model_validator(mode="after")
    def _one_kind(self) -> StructuredOutputs:
        if (self.json_schema is None) == (self.json_object is None):
            raise ValueError("set exactly one of json, json_object")
        return self

    def for_engine(self) -> dict[str, object]:
        return {"json": self.json_schema} if self.json_schema is not None else {"json_object": True}


class Sampling(BaseModel):
    """How a generative model picks its tokens; the engine honours each one (vLLM's names and meaning)."""

    model_config = ConfigDict(extra="forbid")

    temperature: Temperature | None = Field(None, description="0 is greedy; default 1")
    top_p: TopP | None = Field(None, description="nucleus sampling; default 1")
    top_k: TopK | None = Field(None, description="sample among the k likeliest tokens; 0 or unset: all")
    seed: Seed | None = Field(None, description="the same seed and input give the same text")
    stop: StopText | StopSequences | None = Field(
        None, description="up to 4 strings; the text ends before the first one produced"
    )
    n: Annotated[int, Field(ge=1, le=MAX_CHOICES), BeforeValidator(_json_integer)] | None = Field(
        None, description=f"choices to generate, 1 to {MAX_CHOICES}; default 1"
    )
    presence_penalty: Penalty | None = Field(None, description=PENALTY_DESCRIPTION.format("once"))
    frequency_penalty: Penalty | None = Field(None, description=PENALTY_DESCRIPTION.format("by how often"))
    logit_bias: LogitBias | None = Field(None, description=LOGIT_BIAS_DESCRIPTION)
    logprobs: TopLogprobs | None = Field(
        None, description="return log-probabilities: the chosen token's and the k likeliest (0 to 20)"
    )
    structured_outputs: StructuredOutputs | None = Field(
        None, description="constrain the text to a JSON schema or a JSON object"
    )

    def for_job(self) -> JobSampling:
        """The options as a job carries them."""
        options = self.model_dump(exclude_none=True, exclude={"structured_outputs"})
        if self.structured_outputs is not None:
            options["structured_outputs"] = self.structured_outputs.for_engine()
        return JobSampling.of(options)


class InferenceParameters(Sampling):
    max_tokens: MaxTokens = Field(16, description="tokens to generate")


class SubmitRequest(BaseModel):
    """`POST /async-infer` body: a `prompt` for text models, an `input` for embedding models."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"model": "gpu-sim", "prompt": "The three", "parameters": {"max_tokens": 16}},
                {"model": "minilm", "input": ["A cat sits on the mat.", "Stocks fell sharply today."]},
            ]
        },
    )

    model: str = Field(min_length=1, max_length=128, description="a model from GET /v1/models")
    prompt: str | None = Field(None, min_length=1, description="text to complete (text models)")
    input: EmbeddingInput | None = Field(
        None, description="embedding models: the texts to embed, a row of the model's batch each"
    )
    encoding_format: EncodingFormat | None = Field(
        None, description=f"embedding models: {ENCODING_DESCRIPTION}"
    )
    truncate: StrictBool | None = Field(None, description=f"embedding models: {TRUNCATE_DESCRIPTION}")
    parameters: InferenceParameters = Field(default_factory=lambda: InferenceParameters.model_validate({}))
    timeoutMs: TimeoutMs | None = Field(  # noqa: N815 - the public API is camelCase
        None, description="deadline for the job; default 15 min (a cold start from zero fits), at most 1 h"
    )
    priority: Literal["interactive", "batch"] = Field(
        "interactive",
        description="interactive jobs of a model go first; batch jobs fill the capacity they leave and "
        "still start within their deadline",
    )
    callback: CallbackUrl | None = Field(
        None, description="a URL the job's final view is POSTed to when it ends, signed (docs/callbacks.md)"
    )
    ttl: TtlSeconds | None = Field(
        None, description="seconds the job and its result are kept once it ends; default and maximum: 24 h"
    )

    @model_validator(mode="after")
    def _prompt_or_input(self) -> SubmitRequest:
        if (self.prompt is None) == (self.input is None):
            raise ValueError("send either prompt (text models) or input (embedding models)")
        return self


class SubmitResponse(BaseModel):
    """`POST /async-infer` answer."""

    jobId: str  # noqa: N815
    status: Literal["QUEUED"] = "QUEUED"


class Usage(BaseModel):
    """Token counts the model reports; the same shape as OpenAI's `usage`."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class JobResult(BaseModel):
    text: str
    usage: Usage
    finish_reason: Literal["stop", "length"] | None = Field(
        None, description="generative models: whether the text ended (stop) or ran out of max_tokens"
    )


class JobError(BaseModel):
    code: str
    message: str


class JobTimings(BaseModel):
    queueMs: int  # noqa: N815
    inferMs: int  # noqa: N815
    totalMs: int  # noqa: N815
    batchSize: int  # noqa: N815


class CallbackView(BaseModel):
    url: str
    status: Literal["pending", "delivered", "undeliverable"]
    attempts: int
    lastError: str | None = Field(None, description="why the last attempt failed")  # noqa: N815


JobStatusName = Literal["QUEUED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"]


class JobView(BaseModel):
    """`GET /results/{jobId}` answer; `contract.jobs.public_view` builds it."""

    jobId: str  # noqa: N815
    status: JobStatusName
    model: str
    createdAt: str  # noqa: N815
    priority: Literal["interactive", "batch"]
    retryOf: str | None = Field(None, description="the job this one retries")  # noqa: N815
    retriedBy: str | None = Field(None, description="the job that retries this one")  # noqa: N815
    callback: CallbackView | None = Field(None, description="when the job named a callback")
    result: JobResult | EmbeddingResult | None = Field(
        None, description="when COMPLETED: the text, or for an embedding model the vectors"
    )
    error: JobError | None = Field(None, description="when FAILED or CANCELLED: why")
    completedAt: str | None = Field(None, description="once final")  # noqa: N815
    timings: JobTimings | None = Field(None, description="once final")


class JobList(BaseModel):
    """`GET /jobs` answer: the caller's jobs, newest first, each as `GET /results/{jobId}` shows it
    without its result."""

    jobs: list[JobView]
    nextCursor: str | None = Field(  # noqa: N815
        None, description="pass as `cursor` for the next page; null on the last page"
    )


class RetryResponse(BaseModel):
    """`POST /jobs/{jobId}/retry` answer: the new job."""

    jobId: str  # noqa: N815
    status: Literal["QUEUED"] = "QUEUED"
    retryOf: str  # noqa: N815


class TextDelta(BaseModel):
    """`event: delta` of a job's stream: text the model produced, and its token count."""

    text: str
    tokens: int


class StreamReset(BaseModel):
    """`event: reset`: the job restarted on another worker; the text streamed so far is void."""

    reason: str


class Health(BaseModel):
    status: Literal["ok"]


class ErrorDetail(BaseModel):
    code: str
    message: str
    jobId: str | None = Field(None, description="the job to fetch from /results/{jobId}")  # noqa: N815


class ErrorBody(BaseModel):
    """Every error of the Synapse routes."""

    error: ErrorDetail
