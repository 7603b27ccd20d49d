"""Structured output's cost: the engine's output tokens per second when every sequence decodes under a
constraint (llguidance masks each row's tokens, in the engine's sampler), against the same requests
with no constraint, in the same run. Two constraints: a JSON schema, and function tools with
`tool_choice: auto` (the grammar of openai_api/tools.py: plain text or well-formed calls).

One Triton serves SmolLM2-135M-Instruct with the synapse_llm backend, as a worker does, with nothing
else of the platform (the cost measured is the engine's). The same everyday questions (bench.llm_prompts,
schema-free: they do not ask for JSON or for a tool) go at a fixed concurrency, greedy, capped at
MAX_TOKENS, in rounds that alternate the modes (A B C D A B C D), so that a drift of the shared machine
falls on all. The tools mode's prompt describes the tools, as the chat route renders it: it is longer. So
that the grammar's own cost is told apart from the longer prompt's, a fourth mode decodes that same
prompt with no grammar; the figure judged is still tools (auto) against none.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import tritonclient.grpc.aio as grpcclient

from bench.llm import SMOLLM2
from bench.llm_prompts import QUESTIONS
from bench.report import STRUCTURED_KEY, STRUCTURED_TOOLS_KEY
from bench.scenarios import Options, Section
from bench.stack import BenchStack
from contract.catalog_build import CHECKPOINT_DIR, served_model
from manager.triton import generation_inputs
from openai_api.chat_template import render_with
from openai_api.schemas import ChatMessage, Tool
from openai_api.tools import OPEN, ToolChoice, grammar

TITLE = "Structured output: tokens/s under a JSON schema and with tools (auto) against none (the engine)"
FORMER_TITLES = ("Structured output: tokens/s under a JSON schema against none (the engine)",)
CONCURRENCY = 16
MAX_TOKENS = 64
ROUNDS = 2  # of each mode, alternating
WARMUP = 4  # requests of each constrained mode before the first round (the grammar compiler's first use)
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "maxLength": 400}, "confident": {"type": "boolean"}},
    "required": ["answer", "confident"],
    "additionalProperties": False,
}
TOOLS = [
    Tool.model_validate(
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The current weather in a city.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "description": "The city's name, e.g. Paris"},
                        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    },
                    "required": ["city", "unit"],
                    "additionalProperties": False,
                },
            },
        }
    ),
    Tool.model_validate(
        {
            "type": "function",
            "function": {
                "name": "get_time",
                "description": "The current local time in a time zone.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "zone": {"type": "string", "description": "An IANA zone, e.g. Europe/Paris"}
                    },
                    "required": ["zone"],
                    "additionalProperties": False,
                },
            },
        }
    ),
]
NONE, JSON_SCHEMA, AUTO_TOOLS = "none", "JSON schema", "tools (auto)"
TOOLS_PROMPT = "none, tools' prompt"  # the tools described in the prompt, decoded without their grammar
MODES = (NONE, JSON_SCHEMA, TOOLS_PROMPT, AUTO_TOOLS)
TOOL_MODES = (TOOLS_PROMPT, AUTO_TOOLS)
CONSTRAINTS: Mapping[str, Mapping[str, Any] | None] = {
    NONE: None,
    JSON_SCHEMA: {"json": SCHEMA},
    TOOLS_PROMPT: None,
    AUTO_TOOLS: {"grammar": grammar(TOOLS, ToolChoice("auto"))},
}
TOOLS_PROMPT_KEY = "structured_tools_prompt_tps_ratio"  # no target: where the tools mode's cost comes from


@dataclass(frozen=True)
class Answer:
    tokens: int
    prompt_tokens: int
    called: bool  # it opened a tool call


@dataclass(frozen=True)
class Round:
    mode: str
    requests: int
    tokens: int
    prompt_tokens: int
    calls: int  # answers that called a tool
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


async def ask(
    client: grpcclient.InferenceServerClient, model: str, prompt: str, constraint: Mapping[str, Any] | None
) -> Answer:
    """One request, answered whole."""
    sampling: dict[str, Any] = {"max_tokens": MAX_TOKENS, "temperature": 0}
    if constraint is not None:
        sampling["structured_outputs"] = dict(constraint)

    done = asyncio.Event()

    async def requests() -> Any:
        yield {"model_name": model, "inputs": generation_inputs(prompt, sampling)}
        await done.wait()  # the stream stays open until the last response, as the manager keeps it

    tokens, prompt_tokens, text = 0, 0, ""
    try:
        async for result, error in client.stream_infer(requests()):
            if error is not None:
                raise RuntimeError(str(error))
            tokens += int(np.sum(result.as_numpy("num_output_tokens")))
            prompt_tokens = max(prompt_tokens, int(np.max(result.as_numpy("num_input_tokens"))))
            text += result.as_numpy("text_output").reshape(-1)[0].decode("utf-8", "replace")
            if result.as_numpy("finish_reason").reshape(-1)[0] not in (b"None", b""):
                break
    finally:
        done.set()
    return Answer(tokens, prompt_tokens, text.startswith(OPEN))


async def one_round(url: str, model: str, prompts: list[str], mode: str) -> Round:
    client = grpcclient.InferenceServerClient(url)
    queue = list(prompts)
    answers: list[Answer] = []

    async def worker() -> None:
        while queue:
            answers.append(await ask(client, model, queue.pop(), CONSTRAINTS[mode]))

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    elapsed = time.monotonic() - started
    await client.close()
    return Round(
        mode, len(answers), sum(a.tokens for a in answers), sum(a.prompt_tokens for a in answers),
        sum(a.called for a in answers), elapsed,
    )  # fmt: skip


def rendered(template: Any, questions: list[str], tools: list[Tool]) -> list[str]:
    return [
        render_with(template, [ChatMessage.model_validate({"role": "user", "content": q})], tools)
        for q in questions
    ]


def tokens_per_s(rounds: list[Round], mode: str) -> float:
    """The mode's output tokens over its seconds, all its rounds together."""
    mine = [r for r in rounds if r.mode == mode]
    return sum(r.tokens for r in mine) / sum(r.seconds for r in mine)


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
    questions = list((QUESTIONS * 4)[:count])
    plain = rendered(template, questions, [])
    with_tools = rendered(template, questions, TOOLS)
    prompts = {NONE: plain, JSON_SCHEMA: plain, TOOLS_PROMPT: with_tools, AUTO_TOOLS: with_tools}
    rounds: list[Round] = []
    with BenchStack(raw / "stack") as stack:
        url, _ = stack.start_triton("triton", repository, folder.name)
        asyncio.run(one_round(url, folder.name, plain[:CONCURRENCY], NONE))  # warm-up
        for mode in (JSON_SCHEMA, AUTO_TOOLS):
            asyncio.run(one_round(url, folder.name, prompts[mode][:WARMUP], mode))
        for _ in range(ROUNDS):
            for mode in MODES:
                rounds.append(asyncio.run(one_round(url, folder.name, prompts[mode], mode)))
    (raw / "rounds.json").write_text(json.dumps([asdict(r) for r in rounds], indent=2))
    key = {
        STRUCTURED_KEY: tokens_per_s(rounds, JSON_SCHEMA) / tokens_per_s(rounds, NONE),
        STRUCTURED_TOOLS_KEY: tokens_per_s(rounds, AUTO_TOOLS) / tokens_per_s(rounds, NONE),
        TOOLS_PROMPT_KEY: tokens_per_s(rounds, TOOLS_PROMPT) / tokens_per_s(rounds, NONE),
    }
    return Section(TITLE, markdown(rounds, key, count), key=key, former_titles=FORMER_TITLES)


def markdown(rounds: list[Round], key: Mapping[str, float], count: int) -> str:
    rows = "\n".join(
        f"| {r.mode} | {r.prompt_tokens / r.requests:.0f} | {r.tokens} "
        f"| {r.calls if r.mode in TOOL_MODES else '—'} | {r.seconds:.1f} | {r.tokens_per_s:.1f} |"
        for r in rounds
    )
    free = tokens_per_s(rounds, NONE)
    prompt_only = tokens_per_s(rounds, TOOLS_PROMPT)
    names = " and ".join(f"`{t.function.name}`" for t in TOOLS)
    return (
        f"{count} requests a round at {CONCURRENCY} concurrent, greedy, at most {MAX_TOKENS} tokens each, "
        f"on {SMOLLM2.name} in one Triton (the synapse_llm backend, CPU), the modes alternating "
        f"round by round. JSON-schema rounds decode under `{json.dumps(SCHEMA)}`. Tools rounds offer two "
        f"functions ({names}) with `tool_choice: auto`: the prompt is rendered as the chat route renders "
        "it (`render_with`), and SmolLM2's template having no tools of its own, their descriptions and the "
        "call syntax go into the system message, so that prompt is longer (the prompt-tokens column); "
        "its prefill, and its longer context at every step, count in its seconds, as they would in "
        "service. They decode under the grammar the route sends (`openai_api.tools.grammar`: plain text, "
        f'or calls whose arguments validate). The "{TOOLS_PROMPT}" rounds decode that same prompt with no '
        "grammar: the tools mode's cost split into its prompt's and its grammar's. The questions ask for "
        "neither JSON nor a tool.\n\n"
        "| constraint | prompt tokens per request | output tokens | answers that called a tool | seconds "
        "| tokens/s |\n|---|---:|---:|---:|---:|---:|\n"
        f"{rows}\n\n"
        f"**Under a JSON schema: {tokens_per_s(rounds, JSON_SCHEMA):.1f} tokens/s against {free:.1f} "
        f"without, {key[STRUCTURED_KEY]:.0%}** (target: at least 80 %).\n\n"
        f"**With tools (auto): {tokens_per_s(rounds, AUTO_TOOLS):.1f} tokens/s against {free:.1f} "
        f"without, {key[STRUCTURED_TOOLS_KEY]:.0%}** (target: at least 80 %). The same prompt with no "
        f"grammar: {prompt_only:.1f} tokens/s ({key[TOOLS_PROMPT_KEY]:.0%} of none's); the grammar "
        f"itself: {tokens_per_s(rounds, AUTO_TOOLS) / prompt_only:.0%} of that prompt's tokens/s.\n"
    )
