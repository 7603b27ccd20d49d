"""Structured output's cost: the engine's output tokens per second when every sequence decodes under a
JSON schema (llguidance masks each row's tokens, in the engine's sampler), against the same requests
with no constraint, in the same run.

One Triton serves SmolLM2-135M-Instruct with the synapse_llm backend, as a worker does, with nothing
else of the platform (the cost measured is the engine's). The same everyday questions (bench.llm_prompts,
schema-free: they do not ask for JSON) go at a fixed concurrency, greedy, capped at MAX_TOKENS, in
rounds that alternate the two modes (A B A B), so that a drift of the shared machine falls on both.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import tritonclient.grpc.aio as grpcclient

from bench.llm import SMOLLM2
from bench.llm_prompts import QUESTIONS
from bench.report import STRUCTURED_KEY
from bench.scenarios import Options, Section
from bench.stack import BenchStack
from contract.catalog_build import CHECKPOINT_DIR, served_model
from manager.triton import generation_inputs
from openai_api.chat_template import render_with
from openai_api.schemas import ChatMessage

TITLE = "Structured output: tokens/s under a JSON schema against none (the engine)"
CONCURRENCY = 16
MAX_TOKENS = 64
ROUNDS = 2  # of each mode, alternating
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "maxLength": 400}, "confident": {"type": "boolean"}},
    "required": ["answer", "confident"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Round:
    constrained: bool
    tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


async def ask(client: grpcclient.InferenceServerClient, model: str, prompt: str, constrained: bool) -> int:
    """One request, answered whole; its generated tokens."""
    sampling: dict[str, Any] = {"max_tokens": MAX_TOKENS, "temperature": 0}
    if constrained:
        sampling["structured_outputs"] = {"json": SCHEMA}

    done = asyncio.Event()

    async def requests() -> Any:
        yield {"model_name": model, "inputs": generation_inputs(prompt, sampling)}
        await done.wait()  # the stream stays open until the last response, as the manager keeps it

    tokens = 0
    try:
        async for result, error in client.stream_infer(requests()):
            if error is not None:
                raise RuntimeError(str(error))
            tokens += int(np.sum(result.as_numpy("num_output_tokens")))
            if result.as_numpy("finish_reason").reshape(-1)[0] not in (b"None", b""):
                return tokens
    finally:
        done.set()
    return tokens


async def one_round(url: str, model: str, prompts: list[str], constrained: bool) -> Round:
    client = grpcclient.InferenceServerClient(url)
    queue = list(prompts)
    total = 0

    async def worker() -> None:
        nonlocal total
        while queue:
            tokens = await ask(client, model, queue.pop(), constrained)
            total += tokens  # after the await: `total += await ...` would read total before it

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    elapsed = time.monotonic() - started
    await client.close()
    return Round(constrained, total, elapsed)


def structured(opts: Options) -> Section:
    raw = opts.out / "raw" / "structured"
    checkpoint = SMOLLM2.path()
    repository = raw / "models"
    folder = repository / SMOLLM2.folder.name
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(SMOLLM2.folder, folder)
    (folder / CHECKPOINT_DIR).symlink_to(checkpoint.resolve())
    template = served_model(folder).chat_template
    count = 16 if opts.quick else 64
    prompts = [
        render_with(template, [ChatMessage.model_validate({"role": "user", "content": q})])
        for q in (QUESTIONS * 4)[:count]
    ]
    rounds: list[Round] = []
    with BenchStack(raw / "stack") as stack:
        url, _ = stack.start_triton("triton", repository, folder.name)
        asyncio.run(one_round(url, folder.name, prompts[:CONCURRENCY], False))  # warm-up
        for _ in range(ROUNDS):
            for constrained in (False, True):
                rounds.append(asyncio.run(one_round(url, folder.name, prompts, constrained)))
    free = sum(r.tokens for r in rounds if not r.constrained) / sum(
        r.seconds for r in rounds if not r.constrained
    )
    bound = sum(r.tokens for r in rounds if r.constrained) / sum(r.seconds for r in rounds if r.constrained)
    ratio = bound / free
    (raw / "rounds.json").write_text(json.dumps([r.__dict__ for r in rounds], indent=2))
    rows = "\n".join(
        f"| {'JSON schema' if r.constrained else 'none'} | {r.tokens} | {r.seconds:.1f} "
        f"| {r.tokens_per_s:.1f} |"
        for r in rounds
    )
    markdown = (
        f"{len(prompts)} requests a round at {CONCURRENCY} concurrent, greedy, at most {MAX_TOKENS} tokens "
        f"each, on {SMOLLM2.name} in one Triton (the synapse_llm backend, CPU); constrained rounds decode "
        f"under `{json.dumps(SCHEMA)}`.\n\n"
        "| constraint | output tokens | seconds | tokens/s |\n|---|---:|---:|---:|\n"
        f"{rows}\n\n"
        f"**Under a JSON schema: {bound:.1f} tokens/s against {free:.1f} without, {ratio:.0%}** "
        "(target: at least 80 %).\n"
    )
    return Section(TITLE, markdown, key={STRUCTURED_KEY: ratio})
