"""Idempotent submission on real Redis: a retried request creates no second job."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import aiohttp
import pytest

from contract.keys import idempotency_prefix
from frontdoor.idempotency import IdempotencyGuard, Submitted
from tests.integration.conftest import Stack
from tests.integration.helpers import entries_added

pytestmark = pytest.mark.integration


def session(stack: Stack) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=120),
        headers={"x-api-key": stack.api_key},
    )


async def post(
    client: aiohttp.ClientSession, url: str, body: dict[str, Any], key: str | None
) -> tuple[int, dict[str, Any], aiohttp.typedefs.LooseHeaders]:
    headers = {"Idempotency-Key": key} if key is not None else {}
    async with client.post(url, json=body, headers=headers) as response:
        return response.status, dict(await response.json()), response.headers


def new_key() -> str:
    return f"retry-{uuid.uuid4()}"


async def test_the_same_key_and_body_return_the_same_job_and_queue_it_once(stack: Stack):
    redis = stack.redis()
    body = {"model": "gpu-sim", "prompt": "only once, please"}
    key = new_key()
    async with session(stack) as client:
        before = entries_added(redis)
        first = await post(client, f"{stack.api}/async-infer", body, key)
        with_defaults = {**body, "parameters": {"max_tokens": 16}}
        again = await post(client, f"{stack.api}/async-infer", with_defaults, key)
        after = entries_added(redis)
    assert first[0] == again[0] == 202
    assert again[1] == first[1]
    assert again[2].get("Idempotent-Replayed") == "true"
    assert "Idempotent-Replayed" not in first[2]
    assert after == before + 1


async def test_the_same_key_with_another_body_is_a_422_and_queues_nothing(stack: Stack):
    redis = stack.redis()
    key = new_key()
    async with session(stack) as client:
        first = await post(client, f"{stack.api}/async-infer", {"model": "gpu-sim", "prompt": "a"}, key)
        before = entries_added(redis)
        other = await post(client, f"{stack.api}/async-infer", {"model": "gpu-sim", "prompt": "b"}, key)
    assert first[0] == 202
    assert other[0] == 422
    assert other[1]["error"]["code"] == "idempotency_key_reused"
    assert "different request body" in other[1]["error"]["message"]
    assert entries_added(redis) == before


async def test_a_repeated_v1_call_gets_the_same_answer_from_the_same_job(stack: Stack):
    redis = stack.redis()
    body = {"model": "gpu-sim", "prompt": "say it once"}
    key = new_key()
    async with session(stack) as client:
        before = entries_added(redis)
        first = await post(client, f"{stack.api}/v1/completions", body, key)
        again = await post(client, f"{stack.api}/v1/completions", body, key)
        changed = await post(client, f"{stack.api}/v1/completions", {**body, "max_tokens": 3}, key)
    assert first[0] == again[0] == 200
    assert again[1] == first[1]
    assert first[1]["choices"][0]["text"] == "ecno ti yas"
    assert entries_added(redis) == before + 1
    assert changed[0] == 422
    assert changed[1]["error"]["type"] == "invalid_request_error"


async def test_a_key_is_scoped_to_its_route(stack: Stack):
    key = new_key()
    body = {"model": "gpu-sim", "prompt": "two routes"}
    async with session(stack) as client:
        queued = await post(client, f"{stack.api}/async-infer", body, key)
        answered = await post(client, f"{stack.api}/v1/completions", body, key)
    assert (queued[0], answered[0]) == (202, 200)
    assert answered[1]["id"] != f"cmpl-{queued[1]['jobId']}"


async def test_concurrent_retries_with_one_key_create_one_job(stack: Stack):
    redis = stack.redis()
    key = new_key()
    body = {"model": "gpu-sim", "prompt": "racing retries"}
    async with session(stack) as client:
        before = entries_added(redis)
        url = f"{stack.api}/async-infer"
        answers = await asyncio.gather(*(post(client, url, body, key) for _ in range(20)))
    statuses = {status for status, _, _ in answers}
    assert statuses <= {202, 409}, statuses
    assert len({payload["jobId"] for status, payload, _ in answers if status == 202}) == 1
    assert entries_added(redis) == before + 1


async def test_many_threads_keep_every_routes_records_apart(stack: Stack):
    """Powertools' persistence layer rewrites its key prefix on every call: a layer shared by the
    gateway's threads would complete one route's record under another route's prefix, leaving the
    first stuck in progress (its replay a 409) or answering a replay with the other route's job."""
    redis = stack.redis()
    tag = uuid.uuid4().hex[:8]
    requests = [
        (f"{stack.api}/{path}", {"model": "gpu-sim", "prompt": f"p{i}"}, f"{tag}{i}")
        for i in range(40)
        for path in ("async-infer", "v1/completions")
    ]
    async with session(stack) as client:
        first = await asyncio.gather(*(post(client, url, body, key) for url, body, key in requests))
        again = await asyncio.gather(*(post(client, url, body, key) for url, body, key in requests))
    assert [status for status, _, _ in first] == [202, 200] * 40
    assert [(status, body) for status, body, _ in again] == [(status, body) for status, body, _ in first]
    records = [json.loads(redis.get(k) or "{}") for k in redis.scan_iter(idempotency_prefix("*"), count=1000)]
    assert all(record.get("status") == "COMPLETED" for record in records if "status" in record)


async def test_a_key_is_scoped_to_its_caller(stack: Stack):
    guard = IdempotencyGuard(stack.redis(), ttl_s=600)
    created: list[str] = []

    def create() -> str:
        created.append(str(uuid.uuid4()))
        return created[-1]

    key, body = new_key(), {"prompt": "x"}

    def submit(caller: str) -> Submitted:
        return guard.submit(route="scope", key=key, caller=caller, body=body, create=create, context=None)

    alice, alice_again, bob = submit("a"), submit("a"), submit("b")
    assert alice.job_id == alice_again.job_id != bob.job_id
    assert (alice.replayed, alice_again.replayed, bob.replayed) == (False, True, False)
    assert len(created) == 2


async def test_a_key_longer_than_255_characters_is_refused(stack: Stack):
    async with session(stack) as client:
        status, payload, _ = await post(
            client, f"{stack.api}/async-infer", {"model": "gpu-sim", "prompt": "x"}, "k" * 256
        )
    assert status == 400
    assert "idempotency-key" in payload["error"]["message"].lower()
