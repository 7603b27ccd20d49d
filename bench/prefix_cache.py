"""Long shared prompts paid once: the engine's prefix cache and the manager's prefix-aware routing, on the
platform (the gateway, Redis, one manager, two workers) serving SmolLM2-135M-Instruct.

Two figures, each from one stack started fresh (cold caches) per routing rule:
- **Shared prefixes on two workers.** 8 system prompts of about 1,500 tokens each (an agent's
  instructions and tools), each request one of them (drawn at random, the same draw for both rules)
  and an everyday question, streamed, greedy, MAX_TOKENS at most, from CLIENTS closed-loop clients:
  prefix-aware routing against least-loaded routing. Per rule: TTFT (to the first content delta),
  output tokens/s over the run, and the prefix-cache hit rate in prompt tokens, read off both
  workers' engines (`synapse_engine_prefix_cache_{hits,queries}_tokens_total`).
- **Cached against uncached**, on the prefix-aware stack after that run: at 1 client, a new system
  prompt's first request against a second question behind it; at 16 clients, 16 new system prompts at
  once against 16 second questions behind them at once.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import httpx

from bench.llm import SMOLLM2, SYNC_TIMEOUT_S, platform_paths, set_parameter
from bench.llm_prompts import QUESTIONS
from bench.report import _num
from bench.scenarios import Options, Section
from bench.stack import API_KEY, BenchStack
from planner.prefix_hits import PrefixWorkload, hit_rate
from worker_image.metrics_push import PREFIX_HITS, PREFIX_QUERIES, parse_triton_metrics

TITLE = "Prefix caching and prefix-aware routing (SmolLM2, two workers)"
ROUTINGS = ("least_loaded", "prefix")
MAX_TOKENS = 16
NAN = float("nan")
# Each worker's KV cache: 320 blocks of 32 tokens, room for six of the eight system prompts beside the
# live sequences. A fleet's prefixes (tenants, agents, tools) outnumber what one worker's cache holds;
# routing matters only then (the model's own 512 blocks hold all eight on each worker).
CACHE_BLOCKS = 320
BLOCK = 32  # the model's block_size
QUESTION_TOKENS = 30  # about what the chat template and an everyday question add to a system prompt
REQUEST_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Plan:
    prefixes: int  # distinct system prompts in the shared workload
    rules: int  # of about 24 tokens each: 60 make about 1,500 tokens
    clients: int
    requests: int


FULL = Plan(prefixes=8, rules=60, clients=32, requests=256)
QUICK = Plan(prefixes=4, rules=20, clients=8, requests=24)


def system_prompt(index: int, rules: int) -> str:
    """A long instruction set of its own from its first words (so its prefix key is its own)."""
    lines = [f"You are agent {index} of the Synapse help desk, serving team {index * 7 % 13}."]
    lines += [
        f"Rule {index}.{n}: answer in plain words, cite document {n * 31 % 97}, escalate case {n}."
        for n in range(rules)
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class Call:
    ttft_s: float
    seconds: float
    tokens: int
    prompt_tokens: int = 0
    error: str = ""


async def ask(client: httpx.AsyncClient, model: str, system: str, question: str) -> Call:
    """One streamed, greedy chat request: when its first content came, when it ended, its tokens."""
    body = {
        "model": model, "stream": True, "temperature": 0, "max_completion_tokens": MAX_TOKENS,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
    }  # fmt: skip
    started = time.perf_counter()
    first: float | None = None
    tokens = prompt_tokens = 0
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                return Call(NAN, time.perf_counter() - started, 0, error=str(response.status_code))
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("error"):  # the stream's own end: past its deadline, or refused by the engine
                    return Call(NAN, time.perf_counter() - started, 0, error=str(chunk["error"].get("code")))
                if chunk.get("choices") and chunk["choices"][0]["delta"].get("content") and first is None:
                    first = time.perf_counter() - started
                if chunk.get("usage"):
                    tokens = int(chunk["usage"]["completion_tokens"])
                    prompt_tokens = int(chunk["usage"]["prompt_tokens"])
    except httpx.HTTPError as exc:
        return Call(NAN, time.perf_counter() - started, 0, error=type(exc).__name__)
    return Call(NAN if first is None else first, time.perf_counter() - started, tokens, prompt_tokens)


async def closed_loop(
    api: str, model: str, requests: Sequence[tuple[str, str]], clients: int
) -> tuple[list[Call], float]:
    """Each (system, question) once, by `clients` clients each sending its next as its last ends."""
    pending = iter(requests)
    calls: list[Call] = []
    async with httpx.AsyncClient(
        base_url=api, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=REQUEST_TIMEOUT_S,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
    ) as client:  # fmt: skip

        async def one_client() -> None:
            for system, question in pending:
                calls.append(await ask(client, model, system, question))

        started = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(clients)))
    return calls, time.perf_counter() - started


def engine_counts(urls: Sequence[str]) -> tuple[float, float]:
    """Prompt tokens found in and looked up in the prefix caches of these workers' engines, read as the
    worker reads its Triton's metrics."""
    hits = queries = 0.0
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as reply:
            counters = parse_triton_metrics(reply.read().decode(), time.monotonic())
        hits += sum(counters.of(PREFIX_HITS).values())
        queries += sum(counters.of(PREFIX_QUERIES).values())
    return hits, queries


@dataclass(frozen=True)
class Row:
    routing: str
    requests: int
    errors: int
    hit_rate: float
    ttft_p50_ms: float
    ttft_p90_ms: float
    tokens_per_s: float
    prompt_tokens: float  # mean per request


def row_of(routing: str, calls: Sequence[Call], wall_s: float, hits: float, queries: float) -> Row:
    ok = [c for c in calls if not c.error]
    ttfts = sorted(c.ttft_s * 1000 for c in ok if not math.isnan(c.ttft_s))
    p90 = ttfts[min(len(ttfts) - 1, int(0.9 * len(ttfts)))] if ttfts else float("nan")
    return Row(
        routing, len(calls), len(calls) - len(ok), hits / queries if queries else float("nan"),
        statistics.median(ttfts) if ttfts else float("nan"), p90, sum(c.tokens for c in ok) / wall_s,
        statistics.mean(c.prompt_tokens for c in ok) if ok else float("nan"),
    )  # fmt: skip


@dataclass(frozen=True)
class CachedRow:
    clients: int
    uncached_ms: float
    cached_ms: float


async def cached_against_uncached(api: str, model: str, plan: Plan, clients: int, first: int) -> CachedRow:
    """New system prompts' first requests at once, then a second question behind each at once."""
    systems = [system_prompt(first + i, plan.rules) for i in range(clients)]
    cold, _ = await closed_loop(api, model, [(s, QUESTIONS[0]) for s in systems], clients)
    warm, _ = await closed_loop(api, model, [(s, QUESTIONS[1]) for s in systems], clients)
    return CachedRow(
        clients,
        statistics.median(c.ttft_s * 1000 for c in cold),
        statistics.median(c.ttft_s * 1000 for c in warm),
    )


def shared_workload(plan: Plan) -> list[tuple[str, str]]:
    systems = [system_prompt(i, plan.rules) for i in range(plan.prefixes)]
    draw = random.Random(38)
    return [(draw.choice(systems), QUESTIONS[n % len(QUESTIONS)]) for n in range(plan.requests)]


def _say(text: str) -> None:
    print(f"bench: prefix cache: {text}", flush=True)


def _quiet(text: str) -> None:
    pass


def run_routing(
    opts: Options, plan: Plan, routing: str, say: Callable[[str], None]
) -> tuple[Row, list[CachedRow]]:
    raw = opts.out / "raw" / "prefix-cache" / routing
    (path,) = platform_paths(SMOLLM2, static=False)
    with BenchStack(raw / "stack", models=path.model) as stack:
        stack.start_redis()
        config = path.stage(raw / "models", SMOLLM2.path(), SMOLLM2.context) / "config.pbtxt"
        config.write_text(set_parameter(config.read_text(), "num_blocks", str(CACHE_BLOCKS)))
        workers = [f"worker-{n}" for n in ("a", "b")]
        for worker in workers:
            stack.start_worker(worker, raw / "models")
        engines = [stack.triton_metrics[w] for w in workers]
        stack.start_manager(
            "manager", SYNAPSE_MIN_WORKERS="2", SYNAPSE_MAX_WORKERS="2", SYNAPSE_GENERATION_ROUTING=routing
        )
        stack.start_gateway(SYNAPSE_SYNC_TIMEOUT_S=SYNC_TIMEOUT_S)
        say(
            f"{routing}: {plan.requests} requests over {plan.prefixes} system prompts, {plan.clients} clients"
        )
        hits0, queries0 = engine_counts(engines)
        calls, wall_s = asyncio.run(closed_loop(stack.api, path.model, shared_workload(plan), plan.clients))
        hits1, queries1 = engine_counts(engines)
        row = row_of(routing, calls, wall_s, hits1 - hits0, queries1 - queries0)
        (raw / "calls.json").write_text(json.dumps([asdict(c) for c in calls]))
        cached: list[CachedRow] = []
        if routing == "prefix":
            for clients, first in ((1, 100), (16, 200)):
                say(f"cached against uncached at {clients} client(s)")
                cached.append(
                    asyncio.run(cached_against_uncached(stack.api, path.model, plan, clients, first))
                )
    return row, cached


def estimated(plan: Plan, row: Row, uncached_ttft_ms: float) -> float:
    """The planner's hit rate for this run's workload and rule (planner/prefix_hits.py), its prefill
    rate taken from the uncached TTFT of one client."""
    workload = PrefixWorkload(
        prefixes=plan.prefixes, prefix_tokens=int(row.prompt_tokens) - QUESTION_TOKENS,
        question_tokens=QUESTION_TOKENS, clients=plan.clients, requests=plan.requests, workers=2,
        cache_tokens=CACHE_BLOCKS * BLOCK, prefill_tokens_per_s=row.prompt_tokens / (uncached_ttft_ms / 1000),
    )  # fmt: skip
    return hit_rate(workload, "prefix" if row.routing == "prefix" else "least_loaded")


def prefix_cache_key(rows: Sequence[Row], cached: Sequence[CachedRow], plan: Plan) -> dict[str, float]:
    by = {r.routing: r for r in rows}
    uncached_ms = next(c.uncached_ms for c in cached if c.clients == 1)
    key = {
        "prefix_hit_rate": by["prefix"].hit_rate,
        "least_loaded_hit_rate": by["least_loaded"].hit_rate,
        "prefix_hit_rate_estimated": estimated(plan, by["prefix"], uncached_ms),
        "least_loaded_hit_rate_estimated": estimated(plan, by["least_loaded"], uncached_ms),
        "prefix_ttft_gain": by["least_loaded"].ttft_p50_ms / by["prefix"].ttft_p50_ms,
        "prefix_tokens_ratio": by["prefix"].tokens_per_s / by["least_loaded"].tokens_per_s,
    }
    for row in cached:
        key[f"cached_ttft_ratio_{row.clients}"] = row.cached_ms / row.uncached_ms
    return key


def markdown(rows: Sequence[Row], cached: Sequence[CachedRow], key: dict[str, float], plan: Plan) -> str:
    lines = [
        f"`synapse bench prefix` ({plan.prefixes} system prompts of {plan.rules + 1} lines; prompts of "
        f"{_num(rows[0].prompt_tokens)} tokens on average; {plan.requests} streamed greedy requests "
        f"of at most {MAX_TOKENS} tokens from {plan.clients} clients; 2 workers; a fresh stack per rule):",
        "",
        "| routing | requests | errors | prefix-cache hit rate (prompt tokens) | the planner's estimate "
        "| TTFT P50 | TTFT P90 | output tokens/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r.routing} | {r.requests} | {r.errors} | {r.hit_rate:.0%} | "
            f"{key[r.routing + '_hit_rate_estimated']:.0%} | {_num(r.ttft_p50_ms)} ms | "
            f"{_num(r.ttft_p90_ms)} ms | {_num(r.tokens_per_s, 1)} |"
        )
    lines += [
        "",
        f"Prefix-aware against least-loaded: TTFT P50 {key['prefix_ttft_gain']:.2f}x better, output "
        f"tokens/s {key['prefix_tokens_ratio']:.2f}x (targets: hit rate >= 90 %, TTFT >= 1.5x better, "
        "tokens/s >= 0.9x).",
        "",
        "| clients | TTFT, new system prompt | TTFT, the same system prompt cached | ratio (target) |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for c in cached:
        target = "<= 0.25" if c.clients == 1 else "<= 0.5"
        lines.append(
            f"| {c.clients} | {_num(c.uncached_ms)} ms | {_num(c.cached_ms)} ms | "
            f"{c.cached_ms / c.uncached_ms:.2f} ({target}) |"
        )
    return "\n".join(lines) + "\n"


def prefix_cache(opts: Options) -> Section:
    plan = QUICK if opts.quick else FULL
    say = _say if opts.progress else _quiet
    rows: list[Row] = []
    cached: list[CachedRow] = []
    for routing in ROUTINGS:
        row, more = run_routing(opts, plan, routing, say)
        rows.append(row)
        cached += more
    key = prefix_cache_key(rows, cached, plan)
    return Section(TITLE, markdown(rows, cached, key, plan), key=key)
