"""Callbacks end to end: a job submitted with a callback URL through the gateway is announced by the
manager to a receiver on loopback, signed with the tenant's webhook secret from the keys file."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web

from contract.jobs import DEFAULT_TENANT
from contract.tenants import KeyBook, keys_file
from contract.webhooks import ATTEMPT_HEADER, JOB_ID_HEADER, SIGNATURE_HEADER, verify
from tests.dispatcher.harness import eventually
from tests.integration.conftest import Stack
from tests.processes import free_port

pytestmark = pytest.mark.integration

RETRIES_S = 30.0  # the manager retries after 1 s, then 2 s: a healthy run takes about 3 s


@dataclass
class FlakyReceiver:
    """Answers 500 to its first `failures` requests, then 200; keeps every request's headers and body."""

    failures: int
    url: str = ""
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append((dict(request.headers), await request.read()))
        return web.Response(status=500 if len(self.received) <= self.failures else 200)


@pytest.fixture
async def receiver() -> AsyncIterator[FlakyReceiver]:
    receiver = FlakyReceiver(failures=2)
    app = web.Application()
    app.router.add_post("/hooks/synapse", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    receiver.url = f"http://127.0.0.1:{port}/hooks/synapse"
    yield receiver
    await runner.cleanup()


def default_tenant_secret(stack: Stack) -> str:
    """The default tenant's webhook secret from the stack's keys file. A gateway that has not written the
    file yet gets the book entry written here, with the stack's key, before anything is submitted."""
    path = keys_file(stack.state_dir)
    book = KeyBook.load(path)
    if DEFAULT_TENANT not in book.tenants:
        book.ensure_key(stack.api_key, DEFAULT_TENANT)
        book.save(path)
    return book.tenants[DEFAULT_TENANT].webhook_secret


async def test_a_receiver_that_answers_500_twice_gets_the_signed_result_on_the_third_try(
    stack: Stack, receiver: FlakyReceiver
):
    secret = default_tenant_secret(stack)
    async with aiohttp.ClientSession(headers={"x-api-key": stack.api_key}) as session:
        body = {"model": "gpu-sim", "prompt": "call me back", "callback": receiver.url}
        async with session.post(f"{stack.api}/async-infer", json=body) as response:
            assert response.status == 202, await response.text()
            job_id = (await response.json())["jobId"]

        async def delivered() -> bool:
            async with session.get(f"{stack.api}/results/{job_id}") as response:
                view = await response.json()
            return bool(view.get("callback", {}).get("status") == "delivered")

        await eventually(delivered, "the callback delivered", RETRIES_S)
        async with session.get(f"{stack.api}/results/{job_id}") as response:
            view = await response.json()

    assert view["callback"] == {
        "url": receiver.url,
        "status": "delivered",
        "attempts": 3,
        "lastError": "HTTP 500",
    }
    assert [headers[ATTEMPT_HEADER] for headers, _ in receiver.received] == ["1", "2", "3"]
    for headers, raw in receiver.received:
        assert verify(secret, headers[SIGNATURE_HEADER], raw, now=time.time())
        assert headers[JOB_ID_HEADER] == job_id
        sent = json.loads(raw)
        assert (sent["jobId"], sent["status"], sent["result"]["text"]) == (
            job_id,
            "COMPLETED",
            "kcab em llac",
        )
