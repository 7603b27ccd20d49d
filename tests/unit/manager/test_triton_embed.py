"""How the manager sends an embedding batch to Triton (`TritonClient.embed`): a job larger than the
model's max_batch_size goes as requests of at most that many texts, one after another, and its rows come
back in input order; a reply short of rows fails the batch rather than shift vectors between texts."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import deserialize_bytes_tensor

from manager.triton import BatchError, TritonClient


def vector(text: str) -> list[float]:
    """A row that tells its text apart: the number the text names, and its length."""
    return [float(text.split()[1]), float(len(text))]


class Triton:
    """Stands in for tritonclient's aio client: answers a vector per text, records each request's size,
    and fails the test if two requests overlap."""

    def __init__(self, drop_rows: int = 0) -> None:
        self.sizes: list[int] = []
        self._running = 0
        self._drop_rows = drop_rows

    async def infer(self, model: str, inputs: Sequence[Any], outputs: Any, client_timeout: float) -> Any:
        self._running += 1
        assert self._running == 1, "two requests at once: each one's timeout would cover the other's pass"
        texts = [t.decode() for t in deserialize_bytes_tensor(inputs[0]._get_content())]
        await asyncio.sleep(0.001)
        self._running -= 1
        self.sizes.append(len(texts))
        kept = texts[: len(texts) - self._drop_rows]
        return Reply(
            {
                "EMBEDDING": np.array([vector(t) for t in kept], dtype=np.float32),
                "PROMPT_TOKENS": np.array([[len(t.split())] for t in kept], dtype=np.int32),
                "TRUNCATED": np.array([[t.endswith("long")] for t in kept], dtype=np.bool_),
                "ERROR": np.array([[b""] for _ in kept], dtype=np.object_),
            }
        )


class Reply:
    def __init__(self, outputs: dict[str, Any]) -> None:
        self._outputs = outputs

    def as_numpy(self, name: str) -> Any:
        return self._outputs.get(name)


def client_on(triton: Triton) -> TritonClient:
    client = TritonClient("127.0.0.1:1", timeout_s=5.0)
    client._client = triton  # type: ignore[assignment]
    return client


async def test_a_job_larger_than_a_batch_goes_as_requests_one_after_another_in_order():
    triton = Triton()
    texts = [f"text {i}" + (" long" if i % 7 == 0 else "") for i in range(21)]

    embedded = await client_on(triton).embed("minilm", texts, max_batch_size=8)

    assert triton.sizes == [8, 8, 5]
    assert embedded.vectors.tolist() == [vector(t) for t in texts]
    assert embedded.prompt_tokens == [len(t.split()) for t in texts]
    assert embedded.truncated == [t.endswith("long") for t in texts]
    assert embedded.errors == [""] * 21


async def test_a_reply_short_of_rows_fails_the_batch():
    client = client_on(Triton(drop_rows=1))
    with pytest.raises(BatchError, match="returned 3 rows of EMBEDDING for 4") as raised:
        await client.embed("minilm", [f"text {i}" for i in range(4)], max_batch_size=8)
    assert not raised.value.worker_fault
