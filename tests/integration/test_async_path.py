"""The async inference path end to end: HTTP gateway -> front door -> Redis -> manager -> Triton."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from contract.keys import stream_key
from tests.integration.conftest import Stack
from tests.integration.helpers import entries_added

pytestmark = pytest.mark.integration

JSON = {"Content-Type": "application/json"}


async def submit(session: aiohttp.ClientSession, api: str, body: dict[str, Any]) -> str:
    async with session.post(f"{api}/async-infer", json=body) as response:
        payload = await response.json()
        assert response.status == 202, payload
        assert payload["status"] == "QUEUED"
        return str(payload["jobId"])


async def result(session: aiohttp.ClientSession, api: str, job_id: str, wait: float = 20) -> dict[str, Any]:
    async with session.get(f"{api}/results/{job_id}", params={"wait": str(wait)}) as response:
        assert response.status == 200
        return dict(await response.json())


def unlimited(stack: Stack) -> aiohttp.ClientSession:
    """A client with the API key and no cap on open connections."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=120),
        headers={"x-api-key": stack.api_key},
    )


async def test_500_concurrent_jobs_each_get_their_own_answer_in_batches(stack: Stack):
    prompts = [f"prompt number {i} for the batcher" for i in range(500)]
    async with unlimited(stack) as session:
        ids = await asyncio.gather(
            *(submit(session, stack.api, {"model": "gpu-sim", "prompt": p}) for p in prompts)
        )
        results = await asyncio.gather(*(result(session, stack.api, job_id) for job_id in ids))

    assert len(set(ids)) == 500
    assert [r["status"] for r in results] == ["COMPLETED"] * 500
    assert [r["result"]["text"] for r in results] == [p[::-1] for p in prompts]
    batch_sizes = [r["timings"]["batchSize"] for r in results]
    assert max(batch_sizes) > 1, "jobs submitted together should share batches"
    for r in results:
        timings = r["timings"]
        assert timings["totalMs"] == timings["queueMs"] + timings["inferMs"]


async def test_tiny_gpt2_generates_text_within_max_tokens(stack: Stack):
    async with unlimited(stack) as session:
        job_id = await submit(
            session, stack.api, {"model": "tiny-gpt2", "prompt": "The three", "parameters": {"max_tokens": 6}}
        )
        done = await result(session, stack.api, job_id)
    assert done["status"] == "COMPLETED", done
    assert done["model"] == "tiny-gpt2"
    assert done["result"]["text"].strip()
    usage = done["result"]["usage"]
    assert 1 <= usage["completion_tokens"] <= 6
    assert usage["prompt_tokens"] >= 1


async def test_a_prompt_the_model_rejects_fails_only_its_own_job(stack: Stack):
    async with unlimited(stack) as session:
        bad, good = await asyncio.gather(
            submit(session, stack.api, {"model": "gpu-sim", "prompt": "!fail on purpose"}),
            submit(session, stack.api, {"model": "gpu-sim", "prompt": "fine"}),
        )
        bad_result, good_result = await asyncio.gather(
            result(session, stack.api, bad), result(session, stack.api, good)
        )
    assert bad_result["status"] == "FAILED"
    assert bad_result["error"]["code"] == "model_error"
    assert good_result["status"] == "COMPLETED"
    assert good_result["result"]["text"] == "enif"


async def test_without_wait_a_result_read_returns_at_once(stack: Stack):
    async with unlimited(stack) as session:
        job_id = await submit(session, stack.api, {"model": "gpu-sim", "prompt": "quick look"})
        first = await result(session, stack.api, job_id, wait=0)
        final = await result(session, stack.api, job_id, wait=20)
    assert first["status"] in {"QUEUED", "RUNNING", "COMPLETED"}
    assert final["status"] == "COMPLETED"


BAD_REQUESTS = [
    ("not json at all", JSON, 400, "invalid_json"),
    (json.dumps({"model": "gpu-sim"}), JSON, 400, "invalid_request"),
    (json.dumps({"model": "no-such-model", "prompt": "x"}), JSON, 400, "unknown_model"),
    (json.dumps({"model": "gpu-sim", "prompt": "x", "parameters": {"max_tokens": "many"}}), JSON, 400,
     "invalid_request"),
    ("model=gpu-sim&prompt=x", {"Content-Type": "application/x-www-form-urlencoded"}, 415,
     "unsupported_media_type"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "headers", "status", "code"), BAD_REQUESTS)
async def test_bad_requests_get_a_json_4xx_and_enqueue_nothing(
    stack: Stack, body: str, headers: dict[str, str], status: int, code: str
):
    client = stack.redis()
    before = entries_added(client)
    async with (
        unlimited(stack) as session,
        session.post(f"{stack.api}/async-infer", data=body, headers=headers) as resp,
    ):
        payload = await resp.json()
    assert resp.status == status
    assert payload["error"]["code"] == code
    assert payload["error"]["message"]
    assert entries_added(client) == before


async def test_an_unknown_job_is_a_json_404(stack: Stack):
    unknown = f"{stack.api}/results/6f1c7c1e-0000-4000-8000-000000000000"
    async with unlimited(stack) as session, session.get(unknown) as response:
        payload = await response.json()
    assert response.status == 404
    assert payload["error"]["code"] == "not_found"


async def test_healthz_answers_when_redis_does(stack: Stack):
    async with unlimited(stack) as session, session.get(f"{stack.api}/healthz") as response:
        assert response.status == 200
        assert (await response.json()) == {"status": "ok"}


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [({}, 401, "missing_api_key"), ({"x-api-key": "wrong"}, 403, "invalid_api_key"),
     ({"Authorization": "Bearer wrong"}, 403, "invalid_api_key")],
)  # fmt: skip
async def test_without_the_api_key_nothing_is_enqueued(
    stack: Stack, headers: dict[str, str], status: int, code: str
):
    client = stack.redis()
    before = client.xinfo_stream(stream_key("gpu-sim"))["entries-added"]
    body = {"model": "gpu-sim", "prompt": "let me in"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{stack.api}/async-infer", json=body, headers=headers) as response,
    ):
        payload = await response.json()
    assert response.status == status
    assert payload["error"]["code"] == code
    assert client.xinfo_stream(stream_key("gpu-sim"))["entries-added"] == before


async def test_a_bearer_token_is_accepted_as_the_api_key(stack: Stack):
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{stack.api}/async-infer", json={"model": "gpu-sim", "prompt": "bearer"}, headers=headers
        ) as response,
    ):
        assert response.status == 202
