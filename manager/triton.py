"""The manager's Triton client: one gRPC request per batch, one row per job.

Every Synapse model shares one tensor contract (see triton_models/gpu-sim/1/model.py): PROMPT and
MAX_TOKENS in; TEXT, PROMPT_TOKENS, COMPLETION_TOKENS and ERROR out, each shaped [batch, 1].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import tritonclient.grpc.aio as grpcclient

OUTPUTS = ("TEXT", "PROMPT_TOKENS", "COMPLETION_TOKENS", "ERROR")


@dataclass(frozen=True, slots=True)
class RowResult:
    text: str
    prompt_tokens: int
    completion_tokens: int
    error: str = ""


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

    async def max_batch_size(self, model: str) -> int: ...

    async def close(self) -> None: ...


def _as_text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class TritonClient:
    def __init__(self, url: str, timeout_s: float) -> None:
        self._client = grpcclient.InferenceServerClient(url=url)
        self._timeout_s = timeout_s

    async def infer(self, model: str, prompts: Sequence[str], max_tokens: Sequence[int]) -> list[RowResult]:
        batch = len(prompts)
        prompt_tensor = grpcclient.InferInput("PROMPT", [batch, 1], "BYTES")
        prompt_tensor.set_data_from_numpy(np.array([[p.encode("utf-8")] for p in prompts], dtype=np.object_))
        tokens_tensor = grpcclient.InferInput("MAX_TOKENS", [batch, 1], "INT32")
        tokens_tensor.set_data_from_numpy(np.array([[t] for t in max_tokens], dtype=np.int32))
        try:
            reply = await self._client.infer(
                model,
                [prompt_tensor, tokens_tensor],
                outputs=[grpcclient.InferRequestedOutput(name) for name in OUTPUTS],
                client_timeout=self._timeout_s,
            )
        except Exception as exc:  # tritonclient raises its own and grpc's errors; all mean "batch failed"
            raise BatchError(f"{type(exc).__name__}: {exc}", worker_fault=is_worker_fault(exc)) from exc
        texts, prompt_tokens, completion_tokens, errors = (reply.as_numpy(name) for name in OUTPUTS)
        if texts is None or len(texts) != batch:
            rows = 0 if texts is None else len(texts)
            raise BatchError(f"model {model} returned {rows} rows for {batch} prompts", worker_fault=False)
        return [
            RowResult(
                text=_as_text(texts[i][0]),
                prompt_tokens=int(prompt_tokens[i][0]),
                completion_tokens=int(completion_tokens[i][0]),
                error=_as_text(errors[i][0]),
            )
            for i in range(batch)
        ]

    async def max_batch_size(self, model: str) -> int:
        """Read from the model's Triton config, so the limit is stated once, next to the model."""
        config = await self._client.get_model_config(model, as_json=True)
        return int(config["config"].get("max_batch_size", 1)) or 1

    async def close(self) -> None:
        await self._client.close()
