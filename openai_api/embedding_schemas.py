"""Bodies of embedding requests and answers: `POST /v1/embeddings` in OpenAI's shape, and the `input`
of an embedding job on `POST /async-infer`.

`dimensions` is typed so that only its absence validates (the model has one size): a request that sets
it gets a 400 naming it (openai_api.schemas.UNSUPPORTED). `truncate` is this platform's own option, as in
Hugging Face's text-embeddings-inference: OpenAI clients send it with `extra_body`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from contract.embeddings import EncodingFormat

# OpenAI takes up to 2,048 texts; 1,024 vectors as JSON numbers stay under Lambda's 6 MB response
# (contract/embeddings.py), and a client's usual 1,000 go as one job.
MAX_EMBEDDING_INPUTS = 1024
EmbeddingText = Annotated[str, Field(min_length=1)]
EmbeddingInput = Annotated[
    EmbeddingText | Annotated[list[EmbeddingText], Field(min_length=1, max_length=MAX_EMBEDDING_INPUTS)],
    Field(description=f"a text, or a list of up to {MAX_EMBEDDING_INPUTS}: a vector each, in order"),
]
ENCODING_DESCRIPTION = "vectors as JSON numbers (float, default) or as base64 of little-endian float32"
TRUNCATE_DESCRIPTION = (
    "true (default): a text longer than the model's window is cut to it, and its item says truncated; "
    "false: such a text fails the request (400 input_too_long)"
)
DIMENSIONS_UNSUPPORTED = "dimensions is not supported: the model answers vectors of one size only"


def texts_of(value: str | list[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


class EmbeddingRequest(BaseModel):
    """`POST /v1/embeddings` body."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"model": "minilm", "input": ["A cat sits on the mat.", "Hello"]}]},
    )

    model: str = Field(min_length=1, max_length=128, description="an embedding model from GET /v1/models")
    input: EmbeddingInput
    encoding_format: EncodingFormat = Field("float", description=ENCODING_DESCRIPTION)
    dimensions: None = Field(None, description=DIMENSIONS_UNSUPPORTED)
    user: str | None = Field(None, max_length=256, description="an end-user id, for your own records")
    truncate: StrictBool = Field(True, description=TRUNCATE_DESCRIPTION)


class EmbeddingItem(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(description="the vector: numbers, or base64 of float32")
    truncated: bool = Field(description="the text was longer than the model's window and was cut to it")


class EmbeddingUsage(BaseModel):
    prompt_tokens: int = Field(description="tokens the model read, over every text")
    total_tokens: int


class EmbeddingResult(BaseModel):
    """An embedding job's result on `GET /results/{jobId}`: a vector per text, in input order."""

    data: list[EmbeddingItem]
    usage: EmbeddingUsage


class EmbeddingList(EmbeddingResult):
    """`POST /v1/embeddings` answer, as OpenAI's."""

    object: Literal["list"] = "list"
    model: str
