"""Builds the small GPT-2 checkpoint that tests and the local stack serve: no download, ever.

A byte-level BPE tokenizer is trained on a few built-in sentences and a 2-layer GPT-2 is initialised
from a fixed seed, so every machine builds the same checkpoint in about a second. The tiny-gpt2
model loads it with the same code that loads a real checkpoint such as distilgpt2.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

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


def build_tiny_gpt2(dest: Path) -> Path:
    """Writes tokenizer and weights to dest (atomically: built aside, then renamed into place)."""
    if (dest / "config.json").exists():
        return dest
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        list(CORPUS) * 4, vocab_size=VOCAB_SIZE, min_frequency=1, special_tokens=[END_OF_TEXT]
    )
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=bpe,
        bos_token=END_OF_TEXT,
        eos_token=END_OF_TEXT,
        unk_token=END_OF_TEXT,
        pad_token=END_OF_TEXT,
    )
    eos_id = int(tokenizer.eos_token_id)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=256,
        n_embd=64,
        n_layer=2,
        n_head=2,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(config)
    staging = dest.with_name(f".{dest.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    tokenizer.save_pretrained(staging)
    model.save_pretrained(staging, safe_serialization=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        staging.rename(dest)
    except OSError:  # another worker built it first; theirs is identical
        shutil.rmtree(staging, ignore_errors=True)
    return dest
