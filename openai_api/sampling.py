"""The sampling options and token counts both OpenAI routes and `POST /async-infer` speak, with their bounds:
pydantic, because this is where untrusted data enters."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, model_validator

from contract.engine_limits import (
    BIAS_LIMIT,
    MAX_CHOICES,
    MAX_GRAMMAR_CHARS,
    MAX_TOP_LOGPROBS,
    PENALTY_LIMIT,
)
from contract.jobs import Sampling as JobSampling


def json_integer(value: object) -> object:
    """An integer as JSON Schema has it: a number with no fractional part (16 or 16.0), never a string
    ("16") nor a boolean (true, which Python counts as 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be an integer")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError("must be an integer, with no fractional part")
    return int(value)


JsonInt = Annotated[int, BeforeValidator(json_integer)]
# Constraints first, so that the JSON schema states them (minimum, maximum) for the integer itself.
MaxTokens = Annotated[int, Field(ge=1, le=4096), BeforeValidator(json_integer)]

MAX_STOP_SEQUENCES = 4
Temperature = Annotated[float, Strict(), Field(ge=0, le=2)]
TopP = Annotated[float, Strict(), Field(gt=0, le=1)]
TopK = Annotated[int, Field(ge=0, le=1000), BeforeValidator(json_integer)]
# Bounds a JSON number (a double) holds exactly, so a schema's check and ours agree on the edge.
Seed = Annotated[int, Field(ge=0, le=2**32 - 1), BeforeValidator(json_integer)]
StopText = Annotated[str, Field(min_length=1, max_length=256)]
StopSequences = Annotated[list[StopText], Field(max_length=MAX_STOP_SEQUENCES)]


# The engine's limits (contract/engine_limits.py): a request the engine would refuse is refused here.
Penalty = Annotated[float, Strict(), Field(ge=-PENALTY_LIMIT, le=PENALTY_LIMIT)]
Bias = Annotated[float, Strict(), Field(ge=-BIAS_LIMIT, le=BIAS_LIMIT)]
LogitBias = Annotated[dict[Annotated[str, Field(pattern=r"^[0-9]{1,9}$")], Bias], Field(max_length=300)]
TopLogprobs = Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS), BeforeValidator(json_integer)]
PENALTY_DESCRIPTION = (
    f"-{PENALTY_LIMIT} to {PENALTY_LIMIT}; lowers (or raises) tokens the answer has used at all ({{}})"
)
LOGIT_BIAS_DESCRIPTION = (
    f"token id (a string of digits) to a bias from -{BIAS_LIMIT} to {BIAS_LIMIT}, added to its logit"
)
LOGPROBS_DESCRIPTION = (
    f"return log-probabilities: the chosen token's and the k likeliest (0 to {MAX_TOP_LOGPROBS})"
)
TOP_LOGPROBS_DESCRIPTION = (
    f"with logprobs: also the k likeliest tokens at each position (0 to {MAX_TOP_LOGPROBS})"
)


class StructuredOutputs(BaseModel):
    """vLLM's `structured_outputs`: the text is constrained to a JSON schema, to any JSON object, or to a
    Lark grammar (llguidance's dialect, the engine's grammar library)."""

    model_config = ConfigDict(extra="forbid")

    json_schema: dict[str, object] | None = Field(
        None, alias="json", description="a JSON schema the text must validate against"
    )
    json_object: Literal[True] | None = Field(None, description="the text is a JSON object")
    grammar: str | None = Field(
        None, min_length=1, max_length=MAX_GRAMMAR_CHARS, description="a Lark grammar the text must match"
    )

    @model_validator(mode="after")
    def _one_kind(self) -> StructuredOutputs:
        if sum(kind is not None for kind in (self.json_schema, self.json_object, self.grammar)) != 1:
            raise ValueError("set exactly one of json, json_object, grammar")
        return self

    def for_engine(self) -> dict[str, object]:
        if self.json_schema is not None:
            return {"json": self.json_schema}
        if self.grammar is not None:
            return {"grammar": self.grammar}
        return {"json_object": True}


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
    n: Annotated[int, Field(ge=1, le=MAX_CHOICES), BeforeValidator(json_integer)] | None = Field(
        None, description=f"choices to generate, 1 to {MAX_CHOICES}; default 1"
    )
    presence_penalty: Penalty | None = Field(None, description=PENALTY_DESCRIPTION.format("once"))
    frequency_penalty: Penalty | None = Field(None, description=PENALTY_DESCRIPTION.format("by how often"))
    logit_bias: LogitBias | None = Field(None, description=LOGIT_BIAS_DESCRIPTION)
    logprobs: TopLogprobs | None = Field(None, description=LOGPROBS_DESCRIPTION)
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


class Usage(BaseModel):
    """Token counts the model reports; the same shape as OpenAI's `usage`."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
