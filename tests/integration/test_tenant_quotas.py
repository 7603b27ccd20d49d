"""Tenants' quotas on the running stack: a tenant over its rate, or at its quota of jobs in flight, gets
429 with Retry-After, and nothing it sent then reaches a queue."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from contract.keys import stream_key
from tests.integration.conftest import Stack
from tests.integration.helpers import entries_added, start_gateway, with_unserved_model
from tests.integration.tenants import new_tenant_key
from tests.processes import stop

pytestmark = pytest.mark.integration

# A model the gateway below accepts and no worker or manager serves: its jobs stay in flight.
UNSERVED = "held-by-no-worker"


def new_tenant(kind: str) -> str:
    return f"{kind}-{secrets.token_hex(4)}"


@asynccontextmanager
async def client_of(key: str) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=60),
        headers={"x-api-key": key},
    ) as session:
        yield session


async def submit(client: aiohttp.ClientSession, api: str, model: str = "gpu-sim") -> tuple[int, Any, Any]:
    async with client.post(f"{api}/async-infer", json={"model": model, "prompt": "quota"}) as response:
        return response.status, await response.json(), response.headers


async def test_a_tenant_over_its_rate_gets_429_with_retry_after_and_queues_nothing(stack: Stack):
    key = new_tenant_key(stack, new_tenant("rate"), rate=2, burst=2)
    redis = stack.redis()
    before = entries_added(redis)
    async with client_of(key) as client:
        answers = await asyncio.gather(*(submit(client, stack.api) for _ in range(3)))
    after = entries_added(redis)
    assert sorted(status for status, _, _ in answers) == [202, 202, 429]
    _, body, headers = next(answer for answer in answers if answer[0] == 429)
    assert body["error"]["code"] == "rate_limited"
    assert int(headers["Retry-After"]) >= 1
    assert after == before + 2


async def test_a_tenant_at_its_quota_of_jobs_in_flight_gets_429_and_queues_nothing(stack: Stack):
    proc, api = start_gateway(
        stack.env, stack.api_key, stack.logs, "gateway-unserved-model", **with_unserved_model(stack, UNSERVED)
    )
    redis = stack.redis()
    try:
        key = new_tenant_key(stack, new_tenant("quota"), max_inflight=3)
        async with client_of(key) as client:
            accepted = [await submit(client, api, UNSERVED) for _ in range(3)]
            queued = redis.xlen(stream_key(UNSERVED))
            status, body, headers = await submit(client, api, UNSERVED)
            assert [answer[0] for answer in accepted] == [202, 202, 202]
            assert (status, body["error"]["code"]) == (429, "quota_exceeded")
            assert int(headers["Retry-After"]) >= 1
            assert redis.xlen(stream_key(UNSERVED)) == queued

            ids = [answer[1]["jobId"] for answer in accepted]
            async with client.post(f"{api}/jobs/{ids[0]}/cancel") as cancelled:
                assert cancelled.status == 200
            status, body, _ = await submit(client, api, UNSERVED)
            assert status == 202, "a job that ended frees its place in the quota"
            for job_id in [*ids[1:], body["jobId"]]:  # leave nothing in flight behind
                async with client.post(f"{api}/jobs/{job_id}/cancel") as cancelled:
                    assert cancelled.status == 200
    finally:
        stop(proc)
