"""The manager's Triton client: one gRPC request per batch of a one-shot model, one gRPC stream per
job of a generative model.

One-shot models share one tensor contract (see triton_models/gpu-sim/1/model.py): PROMPT and
MAX_TOKENS in; TEXT, PROMPT_TOKENS, COMPLETION_TOKENS and ERROR out, each shaped [batch, 1].
Embedding models (see triton_models/minilm/1/model.py) take PROMPT alone and answer EMBEDDING
[batch, dimensions] with PROMPT_TOKENS, TRUNCATED and ERROR; a batch larger than the model's
max_batch_size (one job of many texts) goes as several requests, one after another.
Generative models are decoupled and speak the contract of Triton's vLLM backend (see
worker_image/README.md): `text_input`, `stream`, `sampling_parameters` (JSON) in; `text_output`
deltas, `finish_reason`, `num_input_tokens`, `num_output_tokens` out, one response per step.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import tritonclient.grpc.aio as grpcclient

from contract.jobs import Choice
from contract.time_limit import within

OUTPUTS = ("TEXT", "PROMPT_TOKENS", "COMPLETION_TOKENS", "ERROR")
EMBEDDING_OUTPUTS = ("EMBEDDING", "PROMPT_TOKENS", "TRUNCATED", "ERROR")


@dataclass(frozen=True, slots=True)
class RowResult:
    text: str
    prompt_tokens: int
    completion_tokens: int
    error: str = ""


NOT_FINISHED = ("", "None")  # vLLM's finish_reason until the last response
REFUSAL_PREFIX = "invalid request"  # how the engine starts a refusal of the request's parameters


@dataclass(frozen=True, slots=True)
class Embedded:
    """An embedding model's answer for a batch of texts, a row each, in order."""

    vectors: npt.NDArray[np.float32]  # [texts, dimensions]
    prompt_tokens: list[int]
    truncated: list[bool]
    errors: list[str]

    def rows(self, start: int, stop: int) -> Embedded:
        return Embedded(
            self.vectors[start:stop],
            self.prompt_tokens[start:stop],
            self.truncated[start:stop],
            self.errors[start:stop],
        )


@dataclass(frozen=True, slots=True)
class Generated:
    """A generation's end, as the engine reported it: its choices (one unless the job asked for n)."""

    choices: tuple[Choice, ...]
    prompt_tokens: int

    @property
    def completion_tokens(self) -> int:
        return sum(choice.completion_tokens for choice in self.choices)


# A delta of one choice: its index, new text, the tokens that made it, their log-probabilities (when asked).
OnDelta = Callable[[int, str, int, list[Any]], None]


@dataclass(frozen=True, slots=True)
class Gaps:
    """The longest silence from a worker that is not a hang: before a generation's first response (its
    prompt may wait behind others' prefills inside the engine), and between two responses (one step)."""

    first: float
    between: float


WORKER_FAULTS = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED")


class BatchError(Exception):
    """The whole batch failed: the worker is unreachable or timed out (worker_fault), or the model
    rejected the request, which may be the fault of one of its prompts."""

    def __init__(self, message: str, *, worker_fault: bool) -> None:
        super().__init__(message)
        self.worker_fault = worker_fault


def is_worker_fault(exc: Exception) -> bool:
    """gRPC transport failures are the worker's; an error status from Triton itself is the model's."""
    status = getattr(exc, "status", lambda: None)()
    return status is None or any(code in str(status) for code in WORKER_FAULTS)


class InferenceClient(Protocol):
    """The seam between the dispatcher and a worker; the real one speaks gRPC to Triton."""

    async def infer(
        self, model: str, prompts: Sequence[str], max_tokens: Sequence[int]
    ) -> list[RowResult]: ...

    async def generate(
        self, model: str, prompt: str, sampling: Mapping[str, Any], on_delta: OnDelta, gaps: Gaps
    ) -> Generated: ...

    async def embed(self, model: str, texts: Sequence[str], max_batch_size: int) -> Embedded: ...

    async def close(self) -> None: ...


def _prompt_input(texts: Sequence[str]) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("PROMPT", [len(texts), 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[t.encode("utf-8")] for t in texts], dtype=np.object_))
    return tensor


def _as_text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class TritonClient:
    def __init__(self, url: str, timeout_s: float) -> None:
        self._client = grpcclient.InferenceServerClient(url=url)
        self._timeout_s = timeout_s

    async def infer(self, model: str, prompts: Sequence[str], max_tokens: Sequence[int]) -> list[RowResult]:
        tokens_tensor = grpcclient.InferInput("MAX_TOKENS", [len(prompts), 1], "INT32")
        tokens_tensor.set_data_from_numpy(np.array([[t] for t in max_tokens], dtype=np.int32))
        texts, prompt_tokens, completion_tokens, errors = await self._run(
            model, [_prompt_input(prompts), tokens_tensor], OUTPUTS, len(prompts)
        )
        return [
            RowResult(
                text=_as_text(texts[i][0]),
                prompt_tokens=int(prompt_tokens[i][0]),
                completion_tokens=int(completion_tokens[i][0]),
                error=_as_text(errors[i][0]),
            )
            for i in range(len(prompts))
        ]

    async def embed(self, model: str, texts: Sequence[str], max_batch_size: int) -> Embedded:
        """Vectors for the texts: requests of at most max_batch_size rows, one after another (the model
        runs them so anyway; sent together, each request's timeout would also cover the passes ahead of
        it, and a long job's last ones would time out on a healthy worker), put back together in order."""
        parts = [
            await self._embed_chunk(model, texts[i : i + max_batch_size])
            for i in range(0, len(texts), max_batch_size)
        ]
        return Embedded(
            np.concatenate([p.vectors for p in parts]),
            [n for p in parts for n in p.prompt_tokens],
            [t for p in parts for t in p.truncated],
            [e for p in parts for e in p.errors],
        )

    async def _embed_chunk(self, model: str, texts: Sequence[str]) -> Embedded:
        vectors, tokens, truncated, errors = await self._run(
            model, [_prompt_input(texts)], EMBEDDING_OUTPUTS, len(texts)
        )
        return Embedded(
            vectors.astype(np.float32, copy=False),
            [int(n) for n in tokens.reshape(-1)],
            [bool(t) for t in truncated.reshape(-1)],
            [_as_text(e) for e in errors.reshape(-1)],
        )

    async def _run(
        self, model: str, inputs: list[grpcclient.InferInput], outputs: Sequence[str], rows: int
    ) -> list[npt.NDArray[Any]]:
        """One request of `rows` rows; its outputs in the order asked, each a row per input row."""
        try:
            reply = await self._client.infer(
                model,
                inputs,
                outputs=[grpcclient.InferRequestedOutput(name) for name in outputs],
                client_timeout=self._timeout_s,
            )
        except Exception as exc:  # tritonclient raises its own and grpc's errors; all mean "batch failed"
            raise BatchError(f"{type(exc).__name__}: {exc}", worker_fault=is_worker_fault(exc)) from exc
        found = [reply.as_numpy(name) for name in outputs]
        for name, array in zip(outputs, found, strict=True):
            if array is None or len(array) != rows:
                got = 0 if array is None else len(array)
                message = f"model {model} returned {got} rows of {name} for {rows}"
                raise BatchError(message, worker_fault=False)
        return found

    async def generate(
        self, model: str, prompt: str, sampling: Mapping[str, Any], on_delta: OnDelta, gaps: Gaps
    ) -> Generated:
        """Streams one generation: each response's text goes to on_delta as it arrives.

        No response for longer than the gap allowed (`gaps`: before the first, and between two) means the
        worker hangs (TimeoutError). Cancelling this call cancels the gRPC stream, and Triton then
        cancels the request in the engine.
        """
        done = asyncio.Event()

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield {"model_name": model, "inputs": generation_inputs(prompt, sampling)}
            await done.wait()  # the stream stays open until the last response is in

        responses = self._client.stream_infer(requests())
        try:
            return await _follow(responses, on_delta, gaps)
        except (TimeoutError, asyncio.CancelledError):
            responses.cancel()
            raise
        except BatchError:
            raise
        except Exception as exc:
            raise BatchError(f"{type(exc).__name__}: {exc}", worker_fault=is_worker_fault(exc)) from exc
        finally:
            done.set()

    async def close(self) -> None:
        await self._client.close()


def generation_inputs(prompt: str, sampling: Mapping[str, Any]) -> list[grpcclient.InferInput]:
    """The vLLM backend's inputs: the prompt, streaming on, the sampling options, the counts asked for."""
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([prompt.encode("utf-8")], dtype=np.object_))
    options = grpcclient.InferInput("sampling_parameters", [1], "BYTES")
    options.set_data_from_numpy(np.array([json.dumps(dict(sampling)).encode()], dtype=np.object_))
    inputs = [text, options]
    for flag in (
        "stream",
        "exclude_input_in_output",
        "return_finish_reason",
        "return_num_input_tokens",
        "return_num_output_tokens",
    ):
        tensor = grpcclient.InferInput(flag, [1], "BOOL")
        tensor.set_data_from_numpy(np.array([True], dtype=bool))
        inputs.append(tensor)
    return inputs


async def _follow(responses: Any, on_delta: OnDelta, gaps: Gaps) -> Generated:
    """Reads responses until every choice has a finish reason; an error response is the model's refusal.
    Outputs hold an element per choice (vLLM's layout for n > 1)."""
    choices: list[_Progress] = []
    prompt_tokens = 0
    stream = responses.__aiter__()
    while True:
        try:
            gap_s = gaps.between if choices else gaps.first
            result, error = await within(gap_s, stream.__anext__())
        except StopAsyncIteration:
            raise BatchError("the worker closed the stream before the end", worker_fault=True) from None
        if error is not None:
            # An error in a response comes from the model: a refusal of the request is final; anything
            # else (the model unloading under it, its engine failing) may pass on another worker.
            message = error.message() if hasattr(error, "message") else str(error)
            raise BatchError(message, worker_fault=not message.startswith(REFUSAL_PREFIX))
        texts = _texts(result.as_numpy("text_output"))
        counts = _ints(result.as_numpy("num_output_tokens"))
        reasons = _texts(result.as_numpy("finish_reason"))
        logprobs = _texts(result.as_numpy("logprobs"))
        prompt_tokens = _first_int(result.as_numpy("num_input_tokens")) or prompt_tokens
        while len(choices) < len(texts):
            choices.append(_Progress())
        for index, choice in enumerate(choices):
            text = texts[index] if index < len(texts) else ""
            tokens = counts[index] if index < len(counts) else 0
            entries = json.loads(logprobs[index]) if index < len(logprobs) and logprobs[index] else []
            if text or tokens:
                choice.add(text, tokens, entries)
                on_delta(index, text, tokens, entries)
            if index < len(reasons) and reasons[index] not in NOT_FINISHED:
                choice.finish_reason = reasons[index]
        if choices and all(choice.finish_reason for choice in choices):
            return Generated(tuple(choice.done() for choice in choices), prompt_tokens)


@dataclass(slots=True)
class _Progress:
    """One choice so far."""

    parts: list[str] = field(default_factory=list)
    tokens: int = 0
    logprobs: list[Any] | None = None
    finish_reason: str = ""

    def add(self, text: str, tokens: int, logprobs: list[Any]) -> None:
        self.parts.append(text)
        self.tokens += tokens
        if logprobs:
            self.logprobs = (self.logprobs or []) + logprobs

    def done(self) -> Choice:
        return Choice("".join(self.parts), self.finish_reason, self.tokens, self.logprobs)


def _texts(values: Any) -> list[str]:
    return [] if values is None else [_as_text(value) for value in values.reshape(-1)]


def _ints(values: Any) -> list[int]:
    return [] if values is None else [int(value) for value in values.reshape(-1)]


def _first_text(values: Any) -> str:
    if values is None or values.size == 0:
        return ""
    return _as_text(values.reshape(-1)[0])


def _first_int(values: Any) -> int:
    if values is None or values.size == 0:
        return 0
    return int(values.reshape(-1)[0])
