"""The job schema and states: what a job is, how it is stored in its hash, and how clients see it."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from contract.embeddings import FLOAT32_BYTES, EncodingFormat, stored_record
from contract.engine_limits import CARRIED_APART, SAMPLING_PARAMETERS


class JobStatus(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_final(self) -> bool:
        return self is not JobStatus.QUEUED and self is not JobStatus.RUNNING


class ResultKind(StrEnum):
    """What a COMPLETED job's stored result holds, written beside it by whoever writes the result."""

    TEXT = "text"
    VECTORS = "vectors"


class Priority(StrEnum):
    """Interactive jobs of a model go first; batch jobs fill the capacity they leave (manager/batching.py)."""

    INTERACTIVE = "interactive"
    BATCH = "batch"


# The tenant of a request that names none: the first tenant of the local keys file, and of a bare handler
# call in unit tests. In AWS every keyed route passes the authorizer, which always names one.
# The longest deadline a job may ask for: SageMaker asynchronous inference's longest, an hour
# (InvokeEndpointAsync's InvocationTimeoutSeconds is at most 3,600 s: docs.aws.amazon.com/sagemaker/
# latest/dg/async-inference-invoke-endpoint.html).
MAX_TIMEOUT_MS = 3_600_000
# A job that names no deadline outlives a cold start from zero with margin: `synapse plan cold-start`
# puts its worst case (a cold instance that pulls the image) near 9 min; tests/unit/planner/test_cold_start.py
# fails if the planner's defaults ever pass this less its margin.
DEFAULT_TIMEOUT_MS = 900_000
DEFAULT_TENANT = "default"
CANCELLED_CODE = "cancelled"
CANCELLED_BY_CLIENT = "cancelled by its client"
CLIENT_GONE = "the client stopped reading the stream"  # a /v1 stream's client left: its generation stops


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Sampling:
    """How a generative model picks its tokens: vLLM's `sampling_parameters`, each one honoured by the
    engine (None: the engine's default)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    n: int | None = None  # choices to generate (None: one)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: Mapping[str, float] | None = None  # token id (as JSON keys are: a string) -> bias
    logprobs: int | None = None  # None: none; k: the chosen token's and the k likeliest
    # vLLM's StructuredOutputsParams: {"json": <JSON schema>} or {"json_object": true}
    structured_outputs: Mapping[str, Any] | None = None

    def engine_options(self, max_tokens: int) -> dict[str, Any]:
        """The options set, as the engine's `sampling_parameters` take them."""
        return {**self.stored(), "max_tokens": max_tokens}

    def stored(self) -> dict[str, Any]:
        """The options set (a stop sequence as a list, as JSON has it)."""
        options: dict[str, Any] = {
            name: getattr(self, name) for name in _SAMPLING_VALUES if getattr(self, name) is not None
        }
        if self.stop:
            options["stop"] = list(self.stop)
        return options

    @classmethod
    def of(cls, stored: Mapping[str, Any]) -> Sampling:
        """From stored or requested options; `stop` may be one string or a list of them."""
        stop = stored.get("stop") or ()
        return cls(
            **{name: stored.get(name) for name in _SAMPLING_VALUES},
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
        )


# Sampling's options besides `stop`, in vLLM's names, stored as given: the engine's, less what a job
# carries apart (contract/engine_limits.py), so a job carries every parameter the engine takes.
_SAMPLING_VALUES = tuple(name for name in SAMPLING_PARAMETERS if name not in CARRIED_APART)


@dataclass(frozen=True, slots=True)
class EmbeddingOptions:
    """What an embedding job asked of its vectors: their encoding in the answer, and whether a text
    longer than the model's window is cut to it (True) or fails the job (False)."""

    encoding_format: EncodingFormat = "float"
    truncate: bool = True

    def stored(self) -> dict[str, Any]:
        return {"encoding_format": self.encoding_format, "truncate": self.truncate}

    @classmethod
    def of(cls, stored: Mapping[str, Any]) -> EmbeddingOptions:
        encoding: EncodingFormat = "base64" if stored.get("encoding_format") == "base64" else "float"
        return cls(encoding_format=encoding, truncate=stored.get("truncate") is not False)


# A job's parameters, typed by its kind: an embedding job (one with inputs) has EmbeddingOptions.
Parameters = Sampling | EmbeddingOptions


_DEFAULTS: dict[bool, Parameters] = {False: Sampling(), True: EmbeddingOptions()}


def parameters_of(stored: str | None, *, embedding: bool) -> Parameters:
    """The parameters a job's record or stream entry holds (JSON). Most jobs set none: those share one
    value, without parsing, on the manager's per-job read path."""
    if not stored or stored == "{}":
        return _DEFAULTS[embedding]
    values = json.loads(stored)
    return EmbeddingOptions.of(values) if embedding else Sampling.of(values)


@dataclass(frozen=True, slots=True)
class Job:
    """A job as the manager sees it: what to run and when it must be done by."""

    id: str
    model: str
    prompt: str
    max_tokens: int
    created_ms: int
    deadline_ms: int
    parameters: Parameters = field(default_factory=Sampling)
    tenant: str = DEFAULT_TENANT
    priority: Priority = Priority.INTERACTIVE
    callback: str = ""  # a URL the manager POSTs the final view to (manager/callbacks.py); "" for none
    ttl_s: int = 0  # how long the record is kept once the job ends; 0: the platform's SYNAPSE_JOB_TTL_S
    retry_of: str = ""  # the FAILED or CANCELLED job this one retries
    inputs: tuple[str, ...] = ()  # an embedding job's texts, a row of the model's batch each; () otherwise
    # The API request this job answers, as its route stores it to read back (a Responses API request,
    # which GET /v1/responses/{id} echoes and previous_response_id continues); "" for none. The manager
    # never reads it, so it stays out of the queue's entry.
    request: str = ""

    @property
    def rows(self) -> int:
        """Rows this job puts in a batch: one per text of an embedding job, one for a prompt."""
        return len(self.inputs) or 1

    @property
    def texts(self) -> tuple[str, ...]:
        """What the model reads, a row each."""
        return self.inputs or (self.prompt,)

    @classmethod
    def new(
        cls, *, model: str, prompt: str, max_tokens: int, timeout_ms: int,
        parameters: Parameters | None = None, tenant: str = DEFAULT_TENANT,
        priority: Priority = Priority.INTERACTIVE, callback: str = "", ttl_s: int = 0, retry_of: str = "",
        inputs: tuple[str, ...] = (),
    ) -> Job:  # fmt: skip
        created = now_ms()
        return cls(
            id=str(uuid.uuid4()),
            model=model,
            prompt=prompt,
            max_tokens=max_tokens,
            created_ms=created,
            deadline_ms=created + timeout_ms,
            parameters=parameters
            if parameters is not None
            else (EmbeddingOptions() if inputs else Sampling()),
            tenant=tenant,
            priority=priority,
            callback=callback,
            ttl_s=ttl_s,
            retry_of=retry_of,
            inputs=inputs,
        )

    def stream_fields(self) -> dict[str, str]:
        """The stream entry carries what the manager needs to run and end the job (the tenant: its quota
        and counts), so it needs no second read per batch."""
        fields = {
            "id": self.id,
            "prompt": self.prompt,
            "max_tokens": str(self.max_tokens),
            "created_ms": str(self.created_ms),
            "deadline_ms": str(self.deadline_ms),
            "parameters": json.dumps(self.parameters.stored(), separators=(",", ":")),
            "tenant": self.tenant,
            "priority": self.priority.value,
        }
        if self.inputs:
            fields["input"] = json.dumps(self.inputs, separators=(",", ":"), ensure_ascii=False)
        return fields

    def hash_fields(self) -> dict[str, str]:
        fields = self.stream_fields()
        fields["model"] = self.model
        fields["status"] = JobStatus.QUEUED
        fields["timeout_ms"] = str(self.deadline_ms - self.created_ms)
        carried = (
            ("callback", self.callback), ("ttl_s", self.ttl_s), ("retry_of", self.retry_of),
            ("request", self.request),
        )  # fmt: skip
        for name, value in carried:
            if value:
                fields[name] = str(value)
        return fields

    @classmethod
    def from_stream(cls, model: str, entry: Mapping[str, str]) -> Job:
        return cls(
            id=entry["id"],
            model=model,
            prompt=entry["prompt"],
            max_tokens=int(entry["max_tokens"]),
            created_ms=int(entry["created_ms"]),
            deadline_ms=int(entry["deadline_ms"]),
            parameters=parameters_of(entry.get("parameters"), embedding=bool(entry.get("input"))),
            tenant=entry.get("tenant") or DEFAULT_TENANT,
            priority=Priority(entry.get("priority") or Priority.INTERACTIVE),
            inputs=tuple(json.loads(entry["input"])) if entry.get("input") else (),
        )

    @classmethod
    def from_hash(cls, fields: Mapping[str, str]) -> Job:
        """The job as it was submitted, from its record (a retry resubmits it)."""
        job = cls.from_stream(fields["model"], fields)
        return replace(
            job,
            callback=fields.get("callback", ""),
            ttl_s=int(fields.get("ttl_s") or 0),
            retry_of=fields.get("retry_of", ""),
            request=fields.get("request", ""),
        )


@dataclass(frozen=True, slots=True)
class Choice:
    """One of a generation's choices (a job asks for n of them): its text, why it ended, its tokens, and
    their log-probabilities when the job asked (OpenAI's chat `logprobs.content` entries)."""

    text: str
    finish_reason: str
    completion_tokens: int
    logprobs: list[Any] | None = None

    def stored(self, index: int) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": index, "text": self.text, "finish_reason": self.finish_reason}
        if self.logprobs is not None:
            choice["logprobs"] = self.logprobs
        return choice


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one job ended: a result, or an error code and message."""

    job_id: str
    status: JobStatus
    started_ms: int
    completed_ms: int
    batch_size: int
    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error_code: str = ""
    error_message: str = ""
    finish_reason: str = ""  # generative models: "stop" or "length", as the engine said
    # A generation's choices, when the job asked for more than one or for log-probabilities; `text` and
    # `finish_reason` are the first's, `completion_tokens` counts them all.
    choices: tuple[Choice, ...] = ()
    # An embedding job's vectors: little-endian float32, `dimensions` wide, a row per text in input order;
    # and whether each text was cut to the model's window.
    embeddings: bytes = b""
    dimensions: int = 0
    truncated: tuple[bool, ...] = ()

    @property
    def inferences(self) -> int:
        """What the job counts as in the cost ledger: an embedding per text, else one inference."""
        return len(self.embeddings) // (FLOAT32_BYTES * self.dimensions) if self.dimensions else 1

    def hash_fields(self) -> dict[str, str]:
        fields = {
            "status": self.status.value,
            "started_ms": str(self.started_ms),
            "completed_ms": str(self.completed_ms),
            "batch_size": str(self.batch_size),
        }
        if self.status is JobStatus.COMPLETED and self.dimensions:
            stored = stored_record(self.embeddings, self.dimensions, self.truncated, self.prompt_tokens)
            fields["result"] = stored
            fields["result_kind"] = ResultKind.VECTORS
        elif self.status is JobStatus.COMPLETED:
            result: dict[str, Any] = {
                "text": self.text,
                "usage": {
                    "prompt_tokens": self.prompt_tokens,
                    "completion_tokens": self.completion_tokens,
                    "total_tokens": self.prompt_tokens + self.completion_tokens,
                },
            }
            if self.finish_reason:
                result["finish_reason"] = self.finish_reason
            if self.choices:
                result["choices"] = [choice.stored(i) for i, choice in enumerate(self.choices)]
            fields["result"] = json.dumps(result, separators=(",", ":"), ensure_ascii=False)
            fields["result_kind"] = ResultKind.TEXT
        else:
            fields["error_code"] = self.error_code
            fields["error_message"] = self.error_message
        return fields
