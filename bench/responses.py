"""The Responses API against chat completions: a non-streamed `POST /v1/responses` runs as a chat job,
so for the same prompts it should cost what `POST /v1/chat/completions` costs. Measured on the platform
(the gateway, the front door, Redis, one manager, one worker) serving SmolLM2-135M-Instruct with its
engine, as bench/llm.py's engine path does.

At 1 and at 16 closed-loop clients, the same everyday questions (bench.llm_prompts), greedy, capped at
MAX_TOKENS, go through one path then the other, round after round (A B A B), so that a drift of the
shared machine falls on both. Per path and concurrency: output tokens per second (the answers' usage
over the rounds' wall time) and the time to the whole answer (not streamed: the first token comes with
the last), mean and P50.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from bench.llm import SMOLLM2, SYNC_TIMEOUT_S, platform_paths
from bench.llm_prompts import QUESTIONS
from bench.report import _num
from bench.scenarios import Options, Section
from bench.stack import API_KEY, BenchStack

TITLE = "Responses API: /v1/responses against /v1/chat/completions (not streamed)"
CHAT, RESPONSES = "/v1/chat/completions", "/v1/responses"
PATHS = (CHAT, RESPONSES)  # the order within each pair of rounds
SLUGS = {CHAT: "chat", RESPONSES: "responses"}
MAX_TOKENS = 48
REQUEST_TIMEOUT_S = 60.0
WITHIN = 0.10  # the target: responses no more than 10 % worse than chat, in tokens/s and in time


@dataclass(frozen=True)
class Plan:
    requests: Mapping[int, int]  # a round's requests, by clients
    rounds: int  # of each path per concurrency, alternating
    warmup: int  # requests of each path, one at a time, before the first round


FULL = Plan({1: 12, 16: 96}, rounds=3, warmup=2)
QUICK = Plan({1: 4, 16: 32}, rounds=2, warmup=2)


def body(path: str, model: str, question: str) -> dict[str, Any]:
    """The same request by either path: one user message, greedy, the same cap on the answer."""
    if path == CHAT:
        messages = [{"role": "user", "content": question}]
        return {"model": model, "messages": messages, "max_completion_tokens": MAX_TOKENS, "temperature": 0}
    return {"model": model, "input": question, "max_output_tokens": MAX_TOKENS, "temperature": 0}


def output_tokens(path: str, payload: Any) -> int | None:
    """The answer's output tokens by its usage; None for a 200 that is not a whole answer."""
    try:
        if path == CHAT:
            if payload["choices"][0]["message"]["content"] is None:
                return None
            return int(payload["usage"]["completion_tokens"])
        if payload["status"] not in ("completed", "incomplete") or not payload["output"]:
            return None
        return int(payload["usage"]["output_tokens"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Call:
    tokens: int
    seconds: float  # from sending the request to the whole answer in hand
    error: str = ""


@dataclass(frozen=True)
class Round:
    path: str
    clients: int
    calls: tuple[Call, ...]
    wall_s: float


async def call(client: httpx.AsyncClient, path: str, model: str, question: str) -> Call:
    started = time.perf_counter()
    try:
        response = await client.post(path, json=body(path, model, question))
    except httpx.HTTPError as exc:
        return Call(0, time.perf_counter() - started, type(exc).__name__)
    seconds = time.perf_counter() - started
    if response.status_code != 200:
        return Call(0, seconds, str(response.status_code))
    tokens = output_tokens(path, response.json())
    return Call(0, seconds, "malformed 200") if tokens is None else Call(tokens, seconds)


async def one_round(
    client: httpx.AsyncClient, path: str, model: str, questions: Sequence[str], clients: int
) -> Round:
    """Each question once, by `clients` closed-loop clients."""
    pending: Iterator[str] = iter(questions)  # shared: each client takes the next question not yet taken
    calls: list[Call] = []

    async def one_client() -> None:
        for question in pending:
            calls.append(await call(client, path, model, question))

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(clients)))
    return Round(path, clients, tuple(calls), time.perf_counter() - started)


def _quiet(text: str) -> None:
    pass


def questions(count: int) -> list[str]:
    return [QUESTIONS[i % len(QUESTIONS)] for i in range(count)]


async def measure(
    api: str, api_key: str, model: str, plan: Plan, say: Callable[[str], None] = _quiet
) -> list[Round]:
    """The warm-up, then at each concurrency `plan.rounds` pairs of rounds, chat then responses."""
    rounds: list[Round] = []
    async with httpx.AsyncClient(
        base_url=api, headers={"Authorization": f"Bearer {api_key}"}, timeout=REQUEST_TIMEOUT_S,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
    ) as client:  # fmt: skip
        for path in PATHS:
            await one_round(client, path, model, questions(plan.warmup), 1)
        for clients, count in plan.requests.items():
            asked = questions(count)
            for index in range(plan.rounds):
                for path in PATHS:
                    say(f"{clients} clients, round {index + 1} of {plan.rounds}: {count} by {path}")
                    rounds.append(await one_round(client, path, model, asked, clients))
    return rounds


@dataclass(frozen=True)
class Row:
    """A path at a concurrency, over all its rounds."""

    path: str
    clients: int
    requests: int
    errors: int
    tokens: int
    wall_s: float
    mean_ms: float  # time to the whole answer, over answered requests
    p50_ms: float
    round_tps: tuple[float, ...]

    @property
    def tps(self) -> float:
        return self.tokens / self.wall_s if self.wall_s else math.nan


NO_TIMES = (math.nan, math.nan)


def rows_of(rounds: Sequence[Round]) -> list[Row]:
    rows = []
    for clients in dict.fromkeys(r.clients for r in rounds):
        for path in PATHS:
            mine = [r for r in rounds if (r.path, r.clients) == (path, clients)]
            if not mine:
                continue
            calls = [c for r in mine for c in r.calls]
            answered = [c.seconds * 1000 for c in calls if not c.error]
            mean, p50 = (statistics.fmean(answered), statistics.median(answered)) if answered else NO_TIMES
            by_round = tuple(sum(c.tokens for c in r.calls) / r.wall_s for r in mine)
            tokens, wall = sum(c.tokens for c in calls), sum(r.wall_s for r in mine)
            errors = len(calls) - len(answered)
            rows.append(Row(path, clients, len(calls), errors, tokens, wall, mean, p50, by_round))
    return rows


def responses_key(rows: Sequence[Row]) -> dict[str, float]:
    """Each path's figures, and responses over chat at every concurrency both ran."""
    key: dict[str, float] = {}
    at = {(r.path, r.clients): r for r in rows}
    for r in rows:
        name = f"responses_{SLUGS[r.path]}"
        key[f"{name}_tps_c{r.clients}"] = r.tps
        key[f"{name}_mean_ms_c{r.clients}"] = r.mean_ms
        key[f"{name}_p50_ms_c{r.clients}"] = r.p50_ms
        key[f"{name}_errors_c{r.clients}"] = r.errors
    for clients in dict.fromkeys(r.clients for r in rows):
        mine, theirs = at.get((RESPONSES, clients)), at.get((CHAT, clients))
        if mine is None or theirs is None:
            continue
        key[f"responses_tps_ratio_c{clients}"] = mine.tps / theirs.tps
        key[f"responses_mean_ratio_c{clients}"] = mine.mean_ms / theirs.mean_ms
        key[f"responses_p50_ratio_c{clients}"] = mine.p50_ms / theirs.p50_ms
    return key


def verdict(key: Mapping[str, float], clients: int) -> str:
    """met, missed (with what missed), or inconclusive where requests failed."""
    tps, mean, p50 = (key[f"responses_{figure}_ratio_c{clients}"] for figure in ("tps", "mean", "p50"))
    checks = (
        ("tokens/s", tps >= 1 - WITHIN),
        ("mean time", mean <= 1 + WITHIN),
        ("P50 time", p50 <= 1 + WITHIN),
    )
    missed = [what for what, ok in checks if not ok]  # a NaN ratio misses
    errors = sum(key.get(f"responses_{slug}_errors_c{clients}", 0) for slug in SLUGS.values())
    told = "met" if not missed else f"**missed** ({', '.join(missed)})"
    return f"inconclusive ({told} as measured, but {errors:,.0f} requests failed)" if errors else told


def markdown(rows: Sequence[Row], key: Mapping[str, float], plan: Plan) -> str:
    table = [
        "| path | clients | requests | errors | output tokens | wall s | output tok/s | tok/s by round "
        "| time to answer mean ms | P50 ms |",
        "| --- " * 10 + "|",
    ]
    for r in rows:
        by_round = ", ".join(_num(t, 1) for t in r.round_tps)
        counts = f"{r.clients} | {r.requests:,} | {r.errors:,} | {r.tokens:,} | {_num(r.wall_s, 1)}"
        times = f"{_num(r.mean_ms)} | {_num(r.p50_ms)}"
        table.append(f"| `{r.path}` | {counts} | {_num(r.tps, 1)} | {by_round} | {times} |")
    levels = [c for c in plan.requests if f"responses_tps_ratio_c{c}" in key]
    ratios = [
        "| clients | tok/s, responses / chat | mean time | P50 time | within 10 % |",
        "| --- " * 5 + "|",
    ]
    for c in levels:
        tps, mean, p50 = (_num(key[f"responses_{figure}_ratio_c{c}"], 2) for figure in ("tps", "mean", "p50"))
        ratios.append(f"| {c} | {tps}x | {mean}x | {p50}x | {verdict(key, c)} |")
    line = "; ".join(
        f"at {c} client{'s' if c > 1 else ''} {_num(key[f'responses_tps_ratio_c{c}'], 2)}x chat's tokens/s "
        f"and {_num(key[f'responses_p50_ratio_c{c}'], 2)}x its P50 time to the answer ({verdict(key, c)})"
        for c in levels
    )
    counts = " and ".join(f"{n} at {c}" for c, n in plan.requests.items())
    tokens = {(r.path, r.clients): r.tokens for r in rows}
    same = all(tokens[CHAT, c] == tokens[RESPONSES, c] for c in levels)
    alike = (
        "\n\nGreedy, both paths gave the same output tokens at each concurrency." if same and levels else ""
    )
    return f"""The gateway, the front door, Redis, one manager and one worker (`SYNAPSE_MIN_WORKERS=1`,
`SYNAPSE_MAX_WORKERS=1`) serving {SMOLLM2.name} with the continuous-batching engine on this machine's CPU
(`triton_models/{SMOLLM2.folder.name}` staged as `{SMOLLM2.served_as}`), as in the LLM section. The same
everyday questions, one user message each, greedy, at most {MAX_TOKENS} output tokens, not streamed: by
`POST /v1/chat/completions` (`messages`, `max_completion_tokens`) and by `POST /v1/responses` (`input`,
`max_output_tokens`, `store` left at its default, true), through httpx with the SDK's parsing left out, so
that the client's CPU on this shared machine weighs on neither path. At each concurrency, a closed loop of
that many clients sends a round's questions ({counts}), chat then responses, {plan.rounds} times
(A B A B), after {plan.warmup} requests of each path one at a time. Output tokens/s: the answers' usage
(`completion_tokens`, `output_tokens`) over the rounds' wall time; the time to the answer runs from
sending a request to its whole answer in hand (its TTFT, since nothing streams), over answered requests.

{chr(10).join(table)}{alike}

{chr(10).join(ratios)}

**Responses against chat: {line}** (target: within 10 %, tokens/s at least 0.9x chat's and the mean and
P50 times at most 1.1x).
"""


def _say(text: str) -> None:
    print(f"bench: responses: {text}", flush=True)


def responses(opts: Options) -> Section:
    raw = opts.out / "raw" / "responses"
    plan = QUICK if opts.quick else FULL
    (path,) = platform_paths(SMOLLM2, static=False)
    with BenchStack(raw / "stack", models=path.model) as stack:
        stack.start_redis()
        path.stage(raw / "models", SMOLLM2.path(), SMOLLM2.context)
        stack.start_worker(f"worker-{path.model}", raw / "models")
        stack.start_manager(f"manager-{path.model}", SYNAPSE_MIN_WORKERS="1", SYNAPSE_MAX_WORKERS="1")
        stack.start_gateway(SYNAPSE_SYNC_TIMEOUT_S=SYNC_TIMEOUT_S)
        rounds = asyncio.run(measure(stack.api, API_KEY, path.model, plan, _say if opts.progress else _quiet))
    (raw / "rounds.json").write_text(json.dumps([asdict(r) for r in rounds], indent=2))
    rows = rows_of(rounds)
    key = responses_key(rows)
    return Section(TITLE, markdown(rows, key, plan), key=key)
