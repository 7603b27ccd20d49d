"""The Responses API benchmark's parts that need no platform: the driver against a small server of our own
answering both routes, the rows and ratios it reports, and the verdict."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from bench.llm_prompts import QUESTIONS
from bench.responses import (
    CHAT,
    MAX_TOKENS,
    RESPONSES,
    Call,
    Plan,
    Round,
    markdown,
    measure,
    responses_key,
    rows_of,
    verdict,
)
from tests.unit.bench.loopback import serving

KEY = "sk-test"


@dataclass
class TwoRoutes:
    """Both routes in OpenAI's shapes, each answer as many tokens as its question has words; the 5th
    chat request a 503."""

    url: str = ""
    seen: list[tuple[str, Any]] = field(default_factory=list)
    auth: set[str] = field(default_factory=set)

    async def chat(self, request: web.Request) -> web.Response:
        payload = await self._seen(CHAT, request)
        if sum(path == CHAT for path, _ in self.seen) == 5:
            return web.json_response({"error": {"code": "overloaded"}}, status=503)
        words = len(payload["messages"][0]["content"].split())
        choice = {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}
        return web.json_response({"choices": [choice], "usage": {"completion_tokens": words}})

    async def responses(self, request: web.Request) -> web.Response:
        payload = await self._seen(RESPONSES, request)
        words = len(payload["input"].split())
        output = [{"type": "message", "content": [{"type": "output_text", "text": "x"}]}]
        return web.json_response({"status": "completed", "output": output, "usage": {"output_tokens": words}})

    async def _seen(self, path: str, request: web.Request) -> Any:
        payload = await request.json()
        self.seen.append((path, payload))
        self.auth.add(request.headers.get("Authorization", ""))
        return payload


@pytest.fixture
async def server() -> AsyncIterator[TwoRoutes]:
    found = TwoRoutes()
    async with serving({CHAT: found.chat, RESPONSES: found.responses}) as url:
        found.url = url
        yield found


async def test_the_paths_alternate_round_by_round_with_the_same_greedy_questions(server: TwoRoutes):
    plan = Plan({1: 3, 4: 8}, rounds=2, warmup=1)
    rounds = await measure(server.url, KEY, "m", plan)
    assert [(r.path, r.clients) for r in rounds] == [(CHAT, 1), (RESPONSES, 1)] * 2 + [
        (CHAT, 4),
        (RESPONSES, 4),
    ] * 2
    assert [len(r.calls) for r in rounds] == [3] * 4 + [8] * 4
    assert len(server.seen) == 2 + 4 * 3 + 4 * 8, "each path's warm-up, then every round's questions"
    assert server.auth == {f"Bearer {KEY}"}
    chats = [p for path, p in server.seen if path == CHAT]
    answers = [p for path, p in server.seen if path == RESPONSES]
    assert sorted(p["messages"][0]["content"] for p in chats) == sorted(p["input"] for p in answers)
    assert {(p["temperature"], p["max_completion_tokens"]) for p in chats} == {(0, MAX_TOKENS)}
    assert {(p["temperature"], p["max_output_tokens"]) for p in answers} == {(0, MAX_TOKENS)}
    assert all(p["input"] in QUESTIONS for p in answers)
    # the 5th chat request (the first of the second round at 1 client) was refused: an error, no tokens
    (failed,) = [c for r in rounds for c in r.calls if c.error]
    assert (failed.error, failed.tokens) == ("503", 0)
    rows = rows_of(rounds)
    assert [(r.path, r.clients, r.requests, r.errors) for r in rows] == [
        (CHAT, 1, 6, 1), (RESPONSES, 1, 6, 0), (CHAT, 4, 16, 0), (RESPONSES, 4, 16, 0)
    ]  # fmt: skip
    at_4 = {r.path: r for r in rows if r.clients == 4}
    assert at_4[CHAT].tokens == at_4[RESPONSES].tokens == 2 * sum(len(q.split()) for q in QUESTIONS[:8])


def rounds_of(path: str, clients: int, seconds: list[float], wall_s: float) -> Round:
    return Round(path, clients, tuple(Call(10, s) for s in seconds), wall_s)


def test_the_ratios_are_responses_over_chat_and_the_verdict_allows_10_percent():
    rounds = [
        rounds_of(CHAT, 1, [1.0, 2.0, 3.0], 6.0),
        rounds_of(RESPONSES, 1, [1.0, 2.1, 3.0], 6.2),
        rounds_of(CHAT, 16, [1.0, 1.0], 1.0),
        rounds_of(RESPONSES, 16, [1.5, 1.5], 1.5),
    ]
    rows = rows_of(rounds)
    key = responses_key(rows)
    assert math.isclose(key["responses_tps_ratio_c1"], 6.0 / 6.2)
    assert math.isclose(key["responses_p50_ratio_c1"], 2.1 / 2.0)
    assert math.isclose(key["responses_mean_ratio_c16"], 1.5)
    assert verdict(key, 1) == "met"
    assert verdict(key, 16) == "**missed** (tokens/s, mean time, P50 time)"
    text = markdown(rows, key, Plan({1: 3, 16: 2}, rounds=1, warmup=0))
    assert "| `/v1/responses` | 1 | 3 | 0 | 30 | 6.2 | 4.8 | 4.8 | 2,033 | 2,100 |" in text
    assert "| 16 | 0.67x | 1.50x | 1.50x | **missed**" in text


def test_failed_requests_make_the_verdict_inconclusive():
    rounds = [rounds_of(CHAT, 1, [1.0], 1.0), Round(RESPONSES, 1, (Call(10, 1.0), Call(0, 0.1, "503")), 1.0)]
    key = responses_key(rows_of(rounds))
    assert verdict(key, 1) == "inconclusive (met as measured, but 1 requests failed)"
