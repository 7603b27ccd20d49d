"""The engine's prefix cache in a real Triton on SmolLM2: greedy answers are the same with the cache and
without it, over the benchmark's questions behind one long shared system prompt, and its metrics count
what it found and what it still computed."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import pytest
import tritonclient.grpc.aio as grpcclient
from transformers import AutoTokenizer

from bench.llm_prompts import QUESTIONS
from tests.engine_client import whole_answer
from tests.models import engine_series, served_alone
from tests.processes import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODEL = "smollm2-135m-instruct"
BLOCK = 32  # the model's block_size: only complete blocks are shared
# About 600 tokens that every request starts with, as an agent's instructions and tools are.
SYSTEM = " ".join(
    f"Rule {i}: answer plainly, name your sources, and keep the queue durable for tenant {i % 7}."
    for i in range(30)
)
ASKED = QUESTIONS[:6]
GREEDY = {"temperature": 0, "max_tokens": 24}


def prompts(checkpoint: Path) -> list[str]:
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    chats = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}] for q in ASKED]
    return [tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) for chat in chats]


def answered(tmp: Path, logs: Path, caching: str) -> tuple[list[tuple[str, int]], dict[str, float]]:
    """Each prompt answered in turn by a fresh engine with prefix caching on or off, and its metrics."""
    with served_alone(
        MODEL, tmp / caching, logs / f"prefix-cache-{caching}.log", {"prefix_caching": caching}
    ) as triton:

        async def ask_all() -> list[tuple[str, int]]:
            client = grpcclient.InferenceServerClient(triton.grpc_url)
            try:
                asked = prompts(triton.folder / "checkpoint")
                return [await whole_answer(client, MODEL, prompt, GREEDY) for prompt in asked]
            finally:
                await client.close()

        def metrics() -> dict[str, float]:
            with urllib.request.urlopen(triton.metrics_url, timeout=5) as reply:
                return engine_series(reply.read().decode(), MODEL)

        answers = asyncio.run(ask_all())
        # the gauges follow the engine at its next check (50 ms): the last answer's blocks cached by then
        queried = "synapse_engine_prefix_cache_queries_tokens_total"
        wait_until(lambda: metrics()[queried] == 0 or metrics()["synapse_engine_kv_blocks_cached"] > 0,
                   10, "the prefix cache's gauges")  # fmt: skip
        return answers, metrics()


def test_greedy_answers_are_the_same_with_the_prefix_cache_and_without(tmp_path: Path, logs: Path) -> None:
    without, metrics_off = answered(tmp_path, logs, "false")
    cached, metrics_on = answered(tmp_path, logs, "true")

    assert [text for text, _ in cached] == [text for text, _ in without]
    assert all(text for text, _ in cached)
    prompt_tokens = [tokens for _, tokens in cached]
    assert metrics_on["synapse_engine_prefix_cache_queries_tokens_total"] == sum(prompt_tokens)
    # every request after the first found the shared system prompt's complete blocks, at least
    shared = len(SYSTEM) // 8 // BLOCK * BLOCK  # well under its token count: SmolLM2 spends < 8 chars a token
    hits = metrics_on["synapse_engine_prefix_cache_hits_tokens_total"]
    assert hits >= shared * (len(ASKED) - 1), metrics_on
    assert hits < sum(prompt_tokens[1:]), "each question's own tokens were computed"
    assert metrics_off["synapse_engine_prefix_cache_hits_tokens_total"] == 0
    assert metrics_on["synapse_engine_kv_blocks_cached"] > 0  # kept for the next prompt, no sequence live
