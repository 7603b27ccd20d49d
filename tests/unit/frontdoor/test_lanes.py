"""The front door's lanes: a tenant past its share of long-polls gets 429 and any tenant past a lane's
capacity 503, each with Retry-After and a JSON body naming the setting, answered before the handler
runs; a cancel and a plain request never wait behind long-polls; and a gateway whose general lane is
busy answers the next request 503 at once and goes on serving."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic import ValidationError

from contract.settings import Settings
from frontdoor import http_server
from frontdoor.lanes import Lanes
from frontdoor.stream_handle import StreamSink
from local_stack.gateway import Gateway
from tests.processes import free_port


def test_a_tenant_past_its_share_of_waits_gets_429_while_another_waits():
    lanes = Lanes.of(Settings(gateway_long_waits=3, gateway_long_waits_per_tenant=2))
    assert lanes.waits.take("hog") is None
    assert lanes.waits.take("hog") is None
    refused = lanes.waits.take("hog")
    assert refused is not None
    assert (refused.status, refused.code) == (429, "too_many_waits")
    assert int(refused.headers["Retry-After"]) >= 1
    assert "SYNAPSE_GATEWAY_LONG_WAITS_PER_TENANT" in refused.message
    assert lanes.waits.take("fair") is None
    full = lanes.waits.take("third")
    assert full is not None
    assert (full.status, full.code) == (503, "waits_full")
    assert "SYNAPSE_GATEWAY_LONG_WAITS" in full.message
    lanes.waits.give_back("hog")
    assert lanes.waits.take("third") is None
    assert (lanes.waits.held("hog"), lanes.waits.held()) == (1, 3)


def test_a_general_lane_past_its_threads_and_queue_refuses_with_503_overloaded():
    lanes = Lanes.of(Settings(gateway_concurrency=1, gateway_queue=2))
    for tenant in ("a", "b", "c"):  # one running, two waiting for the thread
        assert lanes.general.take(tenant) is None
    refused = lanes.general.take("d")
    assert refused is not None
    assert (refused.status, refused.code, refused.headers["Retry-After"]) == (503, "overloaded", "1")
    assert "SYNAPSE_GATEWAY_QUEUE" in refused.message
    lanes.general.give_back("a")
    assert lanes.general.take("d") is None


def test_a_share_of_waits_past_their_capacity_is_refused_at_startup():
    with pytest.raises(ValidationError, match="gateway_long_waits_per_tenant"):
        Settings(gateway_long_waits=4, gateway_long_waits_per_tenant=5)


@dataclass
class Held:
    """The handler double: requests to /hold block until released; the rest answer at once."""

    release: threading.Event
    holding: threading.Semaphore


@pytest.fixture
async def front(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[tuple[str, Held]]:
    held = Held(threading.Event(), threading.Semaphore(0))

    def invoke(event: dict[str, Any], context: object, sink: StreamSink) -> dict[str, Any]:
        if "hold" in event["path"] or (event["queryStringParameters"] or {}).get("wait"):
            held.holding.release()
            held.release.wait(10)
        return {"statusCode": 200, "headers": {"Content-Type": "application/json"}, "body": "{}"}

    monkeypatch.setattr(http_server, "invoke", invoke)
    settings = Settings(
        api_key="k", api_port=free_port(), state_dir=tmp_path, gateway_concurrency=2, gateway_queue=0,
        gateway_long_waits=3, gateway_long_waits_per_tenant=2, gateway_cancels=2,
    )  # fmt: skip
    gateway = Gateway(settings)
    await gateway.start()
    try:
        yield f"http://127.0.0.1:{settings.api_port}", held
    finally:
        held.release.set()
        await gateway.aclose()


async def holding(held: Held, count: int) -> None:
    for _ in range(count):
        await asyncio.wait_for(asyncio.to_thread(held.holding.acquire), 5)


async def test_past_its_busy_threads_the_gateway_answers_503_at_once_and_serves_again(
    front: tuple[str, Held],
):
    api, held = front
    async with aiohttp.ClientSession(headers={"x-api-key": "k"}) as session:
        busy = [asyncio.create_task(session.get(f"{api}/hold/{i}")) for i in range(2)]
        await holding(held, 2)
        async with session.get(f"{api}/results/x") as refused:
            assert refused.status == 503
            assert refused.headers["Retry-After"] == "1"
            assert (await refused.json())["error"]["code"] == "overloaded"
        # A cancel has its own lane: it is answered while the general one is full.
        async with session.post(f"{api}/jobs/x/cancel") as cancel:
            assert cancel.status == 200
        held.release.set()
        for task in busy:
            async with await task as response:
                assert response.status == 200
        async with session.get(f"{api}/results/x") as served:
            assert served.status == 200


async def test_a_tenant_at_its_share_of_waits_leaves_polls_and_cancels_to_others(front: tuple[str, Held]):
    api, held = front
    async with aiohttp.ClientSession(headers={"x-api-key": "k"}) as session:
        polls = [asyncio.create_task(session.get(f"{api}/results/{i}?wait=5")) for i in range(2)]
        await holding(held, 2)
        async with session.get(f"{api}/results/over?wait=5") as refused:
            assert refused.status == 429
            assert int(refused.headers["Retry-After"]) >= 1
            body = await refused.json()
            assert body["error"]["code"] == "too_many_waits"
            assert "SYNAPSE_GATEWAY_LONG_WAITS_PER_TENANT" in body["error"]["message"]
        for path in ("/jobs/x/cancel", "/async-infer"):
            async with session.post(api + path) as quick:
                assert quick.status == 200
        held.release.set()
        for task in polls:
            async with await task as response:
                assert response.status == 200
