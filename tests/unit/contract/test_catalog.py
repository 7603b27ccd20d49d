"""The model catalog: each served model's kind, limits and chat template, derived from its folder in the
model repository before any worker starts, and the same whether built there or read from the JSON the
AWS stacks hand over."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from contract.catalog import CHAT_MODEL, Catalog, CatalogError, ModelKind
from contract.catalog_build import build_catalog, catalog_of
from contract.settings import Settings
from tests.processes import REPO

MODELS = REPO / "triton_models"


def test_the_repositorys_models_get_their_kind_and_limits_from_their_configs():
    catalog = build_catalog(MODELS, ("gpu-sim", CHAT_MODEL, "tiny-gpt2", "minilm"))
    assert {name: catalog[name].kind for name in catalog.names()} == {
        "gpu-sim": ModelKind.ONE_SHOT,
        CHAT_MODEL: ModelKind.GENERATIVE,
        "tiny-gpt2": ModelKind.GENERATIVE,
        "minilm": ModelKind.EMBEDDING,
    }
    chat = catalog[CHAT_MODEL]
    assert (chat.max_model_len, chat.max_num_seqs, chat.kv_tokens) == (8192, 32, 512 * 32)
    assert chat.chat_template is not None and "<|im_start|>" in chat.chat_template.source
    tiny = catalog["tiny-gpt2"]
    assert (tiny.max_model_len, tiny.max_num_seqs, tiny.kv_tokens) == (256, 32, 256 * 32)
    assert (catalog["minilm"].max_batch_size, catalog["minilm"].max_model_len) == (64, 256)
    assert catalog["minilm"].kv_tokens is None and catalog["gpu-sim"].kv_tokens is None
    assert catalog.names(ModelKind.EMBEDDING) == ("minilm",)


def test_a_generative_model_carries_the_chat_template_its_checkpoint_is_built_with(tmp_path: Path):
    """The catalog knows tiny-gpt2's template before any checkpoint exists; the one the worker later builds
    (and whose tokenizer the model runs) carries the same template."""
    from worker_image.checkpoint import build_tiny_gpt2

    before = build_catalog(MODELS, ("tiny-gpt2",))["tiny-gpt2"].chat_template
    folder = shutil.copytree(MODELS / "tiny-gpt2", tmp_path / "tiny-gpt2")
    (folder / "chat_template.jinja").unlink()  # only the checkpoint's own template is left to read
    build_tiny_gpt2(folder / "checkpoint")
    built = build_catalog(tmp_path, ("tiny-gpt2",))["tiny-gpt2"].chat_template
    assert before is not None and built is not None
    assert built.source == before.source
    assert built.eos_token == "<|endoftext|>"
    assert build_catalog(MODELS, ("gpu-sim",))["gpu-sim"].chat_template is None


def test_the_json_the_stacks_write_reads_back_as_the_same_catalog():
    built = build_catalog(MODELS, ("gpu-sim", "tiny-gpt2", "minilm", CHAT_MODEL))
    assert Catalog.from_json(built.to_json()) == built
    settings = Settings(models=("tiny-gpt2", "minilm"), model_catalog=built.to_json())
    assert Catalog.from_json(built.to_json())[CHAT_MODEL].kv_tokens == 512 * 32
    assert catalog_of(settings).names() == ("tiny-gpt2", "minilm")


def test_a_served_model_the_catalog_cannot_describe_stops_the_start_by_name(tmp_path: Path):
    with pytest.raises(CatalogError, match="no-such-model"):
        catalog_of(Settings(models=("gpu-sim", "no-such-model"), model_repository=MODELS))
    only_minilm = build_catalog(MODELS, ("minilm",)).to_json()
    with pytest.raises(CatalogError, match="served models with no catalog entry: gpu-sim"):
        catalog_of(Settings(models=("gpu-sim", "minilm"), model_catalog=only_minilm))
    broken = shutil.copytree(MODELS / "gpu-sim", tmp_path / "gpu-sim")
    (broken / "config.pbtxt").write_text("max_batch_size: [")
    with pytest.raises(CatalogError, match=r"gpu-sim.*does not parse"):
        build_catalog(tmp_path, ("gpu-sim",))
