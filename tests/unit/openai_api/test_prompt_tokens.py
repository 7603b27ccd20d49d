"""The front door counts a prompt's tokens as the engine does, with the tokenizer of the checkpoint the
engine runs, and refuses a prompt that with its max_tokens is over the model's context, at the same
bound as the engine (contract.engine_limits.context_overflow)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from contract.catalog import Catalog
from contract.catalog_build import build_catalog, catalog_of
from contract.settings import Settings
from openai_api.prompt_tokens import context_problem, count_tokens
from tests.processes import REPO

PROMPTS = (
    "Hello there.",
    "naïve café — 東京 🚀",
    "the " * 40,
    "user: hi\nassistant:",
    " leading and trailing ",
)


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    """tiny-gpt2's entry with the checkpoint its worker builds, as `synapse up` catalogs it."""
    from worker_image.checkpoint import build_tiny_gpt2

    repository = tmp_path_factory.mktemp("models")
    folder = shutil.copytree(REPO / "triton_models" / "tiny-gpt2", repository / "tiny-gpt2")
    build_tiny_gpt2(folder / "checkpoint")
    return build_catalog(repository, ("tiny-gpt2",))


def test_the_catalog_names_the_checkpoints_tokenizer_or_the_one_a_worker_builds(
    tiny_gpt2: Catalog, tmp_path: Path
):
    tokenizer = tiny_gpt2["tiny-gpt2"].tokenizer
    assert tokenizer is not None and Path(tokenizer).name == "tokenizer.json" and Path(tokenizer).is_file()
    settings = Settings(
        models=("tiny-gpt2", "gpu-sim"), model_repository=REPO / "triton_models", state_dir=tmp_path
    )
    catalog = catalog_of(settings)
    assert catalog["tiny-gpt2"].tokenizer == str(tmp_path / "checkpoints" / "tiny-gpt2" / "tokenizer.json")
    assert catalog["gpu-sim"].tokenizer is None  # it generates nothing: nothing to count
    not_built = context_problem("tiny-gpt2", "the " * 4_000, 16, catalog, "prompt")
    assert not_built is None, "a tokenizer a worker has not built yet leaves the count to the engine"
    assert build_catalog(REPO / "triton_models", ("tiny-gpt2", "gpu-sim")).get("tiny-gpt2").tokenizer is None  # type: ignore[union-attr]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_the_count_is_the_engines_own(tiny_gpt2: Catalog, prompt: str):
    from transformers import AutoTokenizer

    tokenizer_file = tiny_gpt2["tiny-gpt2"].tokenizer
    assert tokenizer_file is not None
    engine_tokenizer = AutoTokenizer.from_pretrained(Path(tokenizer_file).parent)  # as the engine loads it
    assert count_tokens(tokenizer_file, prompt) == len(engine_tokenizer(prompt)["input_ids"])


def test_a_prompt_is_refused_one_token_past_the_context_and_taken_at_it(tiny_gpt2: Catalog):
    tokenizer_file = tiny_gpt2["tiny-gpt2"].tokenizer
    assert tokenizer_file is not None
    prompt = "the " * 40
    room = 256 - count_tokens(tokenizer_file, prompt)  # tiny-gpt2's context: 256 tokens
    assert context_problem("tiny-gpt2", prompt, room, tiny_gpt2, "prompt") is None
    refused = context_problem("tiny-gpt2", prompt, room + 1, tiny_gpt2, "messages")
    assert refused is not None
    assert (refused.status, refused.code, refused.param) == (400, "context_length_exceeded", "messages")
    assert "context of 256 tokens" in refused.message


def test_an_empty_prompt_is_refused_and_a_model_with_no_tokenizer_is_left_to_its_engine(tiny_gpt2: Catalog):
    empty = context_problem("tiny-gpt2", "", 1, tiny_gpt2, "prompt")
    assert empty is not None and (empty.status, empty.code) == (400, "empty_prompt")
    uncounted = build_catalog(REPO / "triton_models", ("tiny-gpt2", "gpu-sim"))
    assert context_problem("tiny-gpt2", "the " * 4_000, 16, uncounted, "prompt") is None
    assert context_problem("gpu-sim", "the " * 4_000, 16, tiny_gpt2, "prompt") is None  # not served here


def test_a_saved_truncation_does_not_shorten_the_count_and_an_unreadable_file_leaves_it_to_the_engine(
    tiny_gpt2: Catalog, tmp_path: Path
):
    """transformers turns a tokenizer.json's truncation and padding off when the engine calls it; so does
    the front door's count."""
    tokenizer_file = tiny_gpt2["tiny-gpt2"].tokenizer
    assert tokenizer_file is not None
    saved = json.loads(Path(tokenizer_file).read_text())
    saved["truncation"] = {"direction": "Right", "max_length": 4, "strategy": "LongestFirst", "stride": 0}
    truncating = tmp_path / "truncating" / "tokenizer.json"
    truncating.parent.mkdir()
    truncating.write_text(json.dumps(saved))
    prompt = "the " * 40
    assert count_tokens(str(truncating), prompt) == count_tokens(tokenizer_file, prompt)
    broken = tmp_path / "broken.json"
    broken.write_text("{not a tokenizer")
    assert count_tokens(str(broken), prompt) is None
