"""Request and response bodies of the public API; pydantic because this is where untrusted data enters."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_TIMEOUT_MS = 60_000


class InferenceParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_tokens: int = Field(16, ge=1, le=4096, description="tokens to generate")


class SubmitRequest(BaseModel):
    """`POST /async-infer` body."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=128, description="a model from GET /v1/models")
    prompt: str = Field(min_length=1, description="text to complete")
    parameters: InferenceParameters = Field(default_factory=lambda: InferenceParameters(max_tokens=16))
    timeoutMs: int | None = Field(  # noqa: N815 - the public API is camelCase
        None, ge=100, le=MAX_TIMEOUT_MS, description="deadline for the job; default and most 60 s"
    )


class SubmitResponse(BaseModel):
    jobId: str  # noqa: N815
    status: Literal["QUEUED"] = "QUEUED"


class ErrorDetail(BaseModel):
    code: str
    message: str
    jobId: str | None = None  # noqa: N815


class ErrorBody(BaseModel):
    error: ErrorDetail


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}
