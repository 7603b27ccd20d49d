"""An in-process stand-in for a Triton worker: the `InferenceClient` the dispatcher talks to.

It answers every prompt with `<worker id>:<prompt>` and records every batch it is sent. As a
generative worker (`generative=True`) it streams that answer a word per step, `step_s` apart, up to
max_tokens words, and records each generation it starts (`started`) and how many were cancelled. As an
embedding worker (`embedding=True`) it answers each text with `text_vector(text)`, flags a text of more
than `WINDOW` words as truncated, and records each request's texts in `batches`. A test can
hold it (calls block until released), make its next batches fail (`fail_next`) or every batch fail
(`fail_always`), reject any batch that holds a poison prompt, and see how many held calls were
cancelled under it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from contract.catalog import ModelKind, ServedModel
from contract.jobs import Choice
from manager.triton import BatchError, Embedded, Gaps, Generated, OnDelta, RowResult

__all__ = ["BatchError", "FakeWorker"]

Failure = Callable[[], BaseException]
WINDOW = 8  # an embedding worker's window, in words
DIMENSIONS = 4


def text_vector(text: str) -> npt.NDArray[np.float32]:
    """What the embedding worker answers for a text: a vector that names it (its length, words, first
    and last letters), so a test can tell which text a row belongs to."""
    return np.array([len(text), len(text.split()), ord(text[0]), ord(text[-1])], dtype=np.float32)


def model_error() -> BatchError:
    """Triton rejected the request: maybe one of its prompts' fault."""
    return BatchError("StatusCode.INVALID_ARGUMENT: the model rejected the batch", worker_fault=False)


def transport_fault() -> BatchError:
    """The worker could not be reached or timed out."""
    return BatchError("StatusCode.UNAVAILABLE: connection refused", worker_fault=True)


def crash() -> RuntimeError:
    """Something the client never expected: not a BatchError at all."""
    return RuntimeError("the client broke")


def call_cancelled() -> asyncio.CancelledError:
    """What grpc.aio raises from a call whose channel was closed under it; the caller was not cancelled."""
    return asyncio.CancelledError()


class FakeWorker:
    def __init__(
        self, worker_id: str, max_batch: int = 8, poison: str | None = None, *, generative: bool = False,
        max_num_seqs: int = 4, step_s: float = 0.01, embedding: bool = False,
    ) -> None:  # fmt: skip
        self.id = worker_id
        self.generative = generative
        self.embedding = embedding
        self.max_num_seqs = max_num_seqs
        self.step_s = step_s
        self.started: list[str] = []  # prompts of every generation started, in order
        self.active = 0  # generations running now
        self.url = f"fake://{worker_id}"
        self.max_batch = max_batch
        self.poison = poison
        self.batches: list[list[str]] = []  # the prompts of every batch received, in order
        self.split_limits: list[int] = []  # the max_batch_size each embedding batch came with
        self.cancelled = 0  # held calls cancelled before they were released
        self.closed = False
        self._failures: deque[Failure] = deque()
        self._always: Failure | None = None
        self._gate: asyncio.Event | None = None
        self._received = asyncio.Condition()

    # -- what a test sets up -------------------------------------------------------------------

    def hold(self) -> None:
        """Every call from now on blocks until `release()`."""
        if self._gate is None:
            self._gate = asyncio.Event()

    def release(self) -> None:
        if self._gate is not None:
            self._gate.set()
            self._gate = None

    def fail_next(self, *failures: Failure) -> None:
        """The next batches fail with these, one each, in order."""
        self._failures.extend(failures)

    def fail_always(self, failure: Failure | None) -> None:
        self._always = failure

    # -- what a test reads -----------------------------------------------------------------------

    @property
    def held(self) -> bool:
        return self._gate is not None

    @property
    def sizes(self) -> list[int]:
        return [len(batch) for batch in self.batches]

    @property
    def prompts(self) -> list[str]:
        return [prompt for batch in self.batches for prompt in batch]

    async def wait_for_batches(self, count: int, timeout_s: float = 5.0) -> None:
        """Until `count` batches have been received (held ones included)."""
        async with self._received:
            await asyncio.wait_for(self._received.wait_for(lambda: len(self.batches) >= count), timeout_s)

    # -- the InferenceClient protocol ------------------------------------------------------------

    async def infer(self, model: str, prompts: Sequence[str], max_tokens: Sequence[int]) -> list[RowResult]:
        await self._receive(prompts)
        return [
            RowResult(text=f"{self.id}:{prompt}", prompt_tokens=len(prompt.split()), completion_tokens=tokens)
            for prompt, tokens in zip(prompts, max_tokens, strict=True)
        ]

    async def embed(self, model: str, texts: Sequence[str], max_batch_size: int) -> Embedded:
        """The batch's texts as the dispatcher sends them, recorded as one (TritonClient.embed splits a
        batch larger than max_batch_size into requests: tests/unit/manager/test_triton_embed.py), and the
        limit it was told to split by."""
        self.split_limits.append(max_batch_size)
        await self._receive(texts)
        return Embedded(
            np.stack([text_vector(t) for t in texts]),
            [min(len(t.split()), WINDOW) for t in texts],
            [len(t.split()) > WINDOW for t in texts],
            ["" for _ in texts],
        )

    async def _receive(self, prompts: Sequence[str]) -> None:
        """Records a request, then holds, fails or rejects it as the test set up."""
        self.batches.append(list(prompts))
        async with self._received:
            self._received.notify_all()
        gate = self._gate
        if gate is not None:
            try:
                await gate.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        if self._failures:
            raise self._failures.popleft()()
        if self._always is not None:
            raise self._always()
        if self.poison is not None and self.poison in prompts:
            raise model_error()

    def served(self, model: str) -> ServedModel:
        """The catalog's entry for a model this worker's kind and limits."""
        kind = (
            ModelKind.GENERATIVE
            if self.generative
            else ModelKind.EMBEDDING
            if self.embedding
            else ModelKind.ONE_SHOT
        )
        return ServedModel(
            model, kind, max_batch_size=self.max_batch, max_num_seqs=self.max_num_seqs,
            max_model_len=WINDOW if self.embedding else None,
        )  # fmt: skip

    async def generate(
        self, model: str, prompt: str, sampling: Mapping[str, Any], on_delta: OnDelta, gaps: Gaps
    ) -> Generated:
        self.started.append(prompt)
        self.active += 1
        async with self._received:
            self._received.notify_all()
        try:
            if self._failures:
                raise self._failures.popleft()()
            words = f"{self.id}:{prompt}".split(" ")[: int(sampling["max_tokens"])]
            for i, word in enumerate(words):
                gate = self._gate
                if gate is not None:
                    await asyncio.wait_for(gate.wait(), gaps.between if i else gaps.first)
                await asyncio.sleep(self.step_s)
                on_delta(0, word if i == 0 else " " + word, 1, [])
            reason = "length" if len(words) >= int(sampling["max_tokens"]) else "stop"
            return Generated((Choice(" ".join(words), reason, len(words)),), len(prompt.split()))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.active -= 1

    async def wait_for_generations(self, count: int, timeout_s: float = 5.0) -> None:
        async with self._received:
            await asyncio.wait_for(self._received.wait_for(lambda: len(self.started) >= count), timeout_s)

    async def close(self) -> None:
        self.closed = True
