"""Request and response bodies of the public API; pydantic because this is where untrusted data enters."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, model_validator

from contract.embeddings import EncodingFormat
from contract.jobs import MAX_TIMEOUT_MS
from openai_api.embedding_schemas import (
    ENCODING_DESCRIPTION,
    TRUNCATE_DESCRIPTION,
    EmbeddingInput,
    EmbeddingResult,
)
from openai_api.sampling import InferenceParameters, Usage, json_integer

IDEMPOTENCY_KEY_MAX = 255
# Far past any valid prompt (at most SYNAPSE_MAX_PROMPT_CHARS), under Lambda's 6 MB payload; it is also
# the bound on an embedding request's texts together (up to 1,024 of SYNAPSE_MAX_PROMPT_CHARS each).
MAX_BODY_BYTES = 4 * 1024 * 1024
TimeoutMs = Annotated[int, Field(ge=100, le=MAX_TIMEOUT_MS), BeforeValidator(json_integer)]


# A job's record outlives its end by ttl seconds: at least a minute, to be read at all; at most the
# platform's SYNAPSE_JOB_TTL_S (checked per request: the setting may lower it).
MIN_TTL_S = 60
MAX_TTL_S = 7 * 86_400
TtlSeconds = Annotated[int, Field(ge=MIN_TTL_S, le=MAX_TTL_S), BeforeValidator(json_integer)]
MAX_CALLBACK_CHARS = 2048
CallbackUrl = Annotated[
    str, Field(min_length=8, max_length=MAX_CALLBACK_CHARS, pattern=r"^https?://[^\s/$.?#][^\s]*$")
]


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
