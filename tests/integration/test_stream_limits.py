"""Fair shares of a front door's streams, on the local stack: a gateway with small limits (3 streams, 2
per tenant), streams held open on jobs no worker serves. A stream past its tenant's share gets 429, one
past the process's capacity 503, each with Retry-After and a JSON error, and neither queues anything;
another tenant is served while one holds its whole share, and a slot comes back when its stream ends."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from tests.integration.conftest import PLAIN_REDIS_ONLY, Stack
from tests.integration.helpers import SERVED, entries_added, start_gateway, with_unserved_model
from tests.integration.tenants import new_tenant_key
from tests.processes import stop

pytestmark = [pytest.mark.integration, PLAIN_REDIS_ONLY]  # the front door's HTTP behaviour, not the store's

HELD = "held-model"  # no worker serves it: a stream of one of its jobs stays open until it is cancelled
CAPACITY, SHARE = 3, 2
SLOT_BACK_WITHIN_S = 5.0  # a slot's return after its client left: the server looks every 0.25 s
CHAT = {"model": "gpu-sim", "messages": [{"role": "user", "content": "hello"}], "stream": True}


@pytest.fixture(scope="module")
def gateway(stack: Stack) -> Iterator[str]:
    settings = {
        **with_unserved_model(stack, HELD),
        "max_streams": str(CAPACITY),
        "max_streams_per_tenant": str(SHARE),
    }
    proc, base = start_gateway(stack.env, stack.api_key, stack.logs, "gateway-stream-limits", **settings)
    yield base
    stop(proc)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as client:
        yield client


def enqueued(stack: Stack) -> int:
    return entries_added(stack.redis(), [*SERVED, HELD])


async def held_job(session: aiohttp.ClientSession, base: str, key: str) -> str:
    body = {"model": HELD, "prompt": "wait", "timeoutMs": 120_000}
    async with session.post(f"{base}/async-infer", json=body, headers={"x-api-key": key}) as reply:
        assert reply.status == 202, await reply.text()
        return str((await reply.json())["jobId"])


async def open_stream(
    session: aiohttp.ClientSession, base: str, key: str, job_id: str
) -> aiohttp.ClientResponse:
    """The job's stream, its headers read and its body left unread: it holds its slot until closed."""
    return await session.get(f"{base}/results/{job_id}/stream", headers={"x-api-key": key})


async def refusal(reply: aiohttp.ClientResponse) -> tuple[int, str, dict[str, Any]]:
    """The status, Retry-After and JSON body of a refused request."""
    assert reply.headers["Content-Type"].startswith("application/json")
    return reply.status, reply.headers.get("Retry-After", ""), await reply.json()


async def cancel(session: aiohttp.ClientSession, base: str, key: str, job_id: str) -> None:
    async with session.post(f"{base}/jobs/{job_id}/cancel", headers={"x-api-key": key}) as reply:
        assert reply.status in (200, 202), await reply.text()


async def end_of(stream: aiohttp.ClientResponse) -> str:
    """The name of the stream's last event, read to its end."""
    lines = (await stream.text()).splitlines()
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("event:")]
    return names[-1] if names else ""


async def test_a_tenant_past_its_share_gets_429_and_another_tenant_is_still_served(
    stack: Stack, gateway: str, session: aiohttp.ClientSession
):
    hog, fair = new_tenant_key(stack, "stream-hog"), new_tenant_key(stack, "stream-fair")
    hog_jobs = [await held_job(session, gateway, hog) for _ in range(SHARE)]
    held = [await open_stream(session, gateway, hog, job) for job in hog_jobs]
    try:
        assert [s.status for s in held] == [200] * SHARE
        before = enqueued(stack)
        chat = await session.post(f"{gateway}/v1/chat/completions", json=CHAT, headers={"x-api-key": hog})
        status, retry_after, body = await refusal(chat)
        assert (status, body["error"]["code"]) == (429, "too_many_streams"), body
        assert int(retry_after) >= 1
        assert "SYNAPSE_MAX_STREAMS_PER_TENANT" in body["error"]["message"]
        third = await open_stream(session, gateway, hog, hog_jobs[0])
        status, retry_after, body = await refusal(third)
        assert (status, body["error"]["code"]) == (429, "too_many_streams"), body
        assert enqueued(stack) == before, "a refused stream queued a job"

        fair_job = await held_job(session, gateway, fair)
        served = await open_stream(session, gateway, fair, fair_job)  # the hog holds its whole share
        assert served.status == 200
        assert served.headers["Content-Type"].startswith("text/event-stream")
        held.append(served)

        before = enqueued(stack)
        completion = {"model": "gpu-sim", "prompt": "full", "max_tokens": 2, "stream": True}
        full = await session.post(f"{gateway}/v1/completions", json=completion, headers={"x-api-key": fair})
        status, retry_after, body = await refusal(full)
        assert (status, body["error"]["code"]) == (503, "streams_full"), body
        assert int(retry_after) >= 1
        assert body["error"]["type"] == "server_error"
        assert enqueued(stack) == before, "a refused stream queued a job"

        await cancel(session, gateway, fair, fair_job)  # its stream ends, and gives its slot back
        assert await end_of(served) == "end"
        chat = await session.post(f"{gateway}/v1/chat/completions", json=CHAT, headers={"x-api-key": fair})
        assert chat.status == 200, await chat.text()  # while the hog still holds its whole share
        lines = [line for line in (await chat.text()).splitlines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        assert json.loads(lines[0].removeprefix("data: "))["choices"][0]["delta"]["content"]
    finally:
        for job in hog_jobs:
            await cancel(session, gateway, hog, job)
        for stream in held:
            stream.close()


async def test_a_stream_whose_client_leaves_gives_its_slot_back_while_its_job_still_waits(
    stack: Stack, gateway: str, session: aiohttp.ClientSession
):
    """The streams have nothing to send (no worker serves their jobs, as with a paused manager): their
    clients closing them is the only sign, and their tenant's share comes back at once, not at the
    jobs' deadline two minutes on."""
    key = new_tenant_key(stack, "stream-leaver")
    jobs = [await held_job(session, gateway, key) for _ in range(SHARE)]
    try:
        left = [await open_stream(session, gateway, key, job) for job in jobs]
        assert [s.status for s in left] == [200] * SHARE
        for stream in left:
            stream.close()  # the client goes; its job is still queued, so nothing is ever written
        deadline = asyncio.get_running_loop().time() + SLOT_BACK_WITHIN_S
        while True:
            again = [await open_stream(session, gateway, key, job) for job in jobs]
            statuses = [s.status for s in again]
            for stream in again:
                stream.close()
            if statuses == [200] * SHARE:
                break
            assert asyncio.get_running_loop().time() < deadline, f"slots still held: {statuses}"
            await asyncio.sleep(0.2)
    finally:
        for job in jobs:
            await cancel(session, gateway, key, job)
