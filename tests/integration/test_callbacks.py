"""Callbacks end to end: a job submitted with a callback URL through the gateway is announced by the
manager to a receiver on loopback, signed with the tenant's webhook secret from the keys file; one
tenant's slow receivers leave another's callbacks prompt; an address outside the allowlist is refused.

The stack allowlists 127.0.0.0/8 (tests/integration/conftest.py), as `make up` does: a receiver on
loopback is an internal address, which a manager refuses unless told otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web

from contract.jobs import DEFAULT_TENANT
from contract.settings import Settings
from contract.tenants import KeyBook, keys_file
from contract.webhooks import ATTEMPT_HEADER, JOB_ID_HEADER, SIGNATURE_HEADER, verify
from tests.dispatcher.harness import eventually
from tests.integration.conftest import PLAIN_REDIS_ONLY, Stack
from tests.integration.tenants import new_tenant_key
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


# -- where callbacks may go, and fair delivery ---------------------------------------------------------

LIMITS = Settings.from_env({})  # the stack runs the default bounds
FLOOD = 240  # tenant A's slow callbacks: more than every delivery slot of the manager
ALIASES = [f"127.0.0.{i}" for i in range(2, 81)]  # 79 loopback aliases, each its own address
QUICK = 10  # tenant B's callbacks to a receiver that answers at once
# B's slowest callback (submission to receipt) under A's flood, against its slowest with no flood, in the
# same test: about 1.1 here (1.3 s against 1.2 s). A sender bound per host name alone, with no bound per
# tenant, let the flood take every slot: B's callbacks waited on A's timeouts, none delivered in 30 s.
LOADED_OVER_UNLOADED = 4.0


@dataclass
class HoldingReceiver:
    """Holds every request until released, on every loopback alias; counts those it holds at once."""

    url: str = ""
    released: asyncio.Event = field(default_factory=asyncio.Event)
    held: int = 0
    most_held: int = 0
    requests: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        self.held += 1
        self.most_held = max(self.most_held, self.held)
        try:
            await self.released.wait()
        finally:
            self.held -= 1
        return web.Response(status=200)


@dataclass
class TimingReceiver:
    """Answers 204 at once; keeps when each job's callback arrived (monotonic s), by job id."""

    url: str = ""
    arrived: dict[str, float] = field(default_factory=dict)

    async def handle(self, request: web.Request) -> web.Response:
        self.arrived.setdefault(request.headers[JOB_ID_HEADER], time.monotonic())
        return web.Response(status=204)


@contextlib.asynccontextmanager
async def serving(handle: Callable[[web.Request], Awaitable[web.Response]], bind: str) -> AsyncIterator[int]:
    """An HTTP server answering POST /hook with `handle`, on `bind` and a free port; yields the port."""
    app = web.Application()
    app.router.add_post("/hook", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, bind, port).start()
    try:
        yield port
    finally:
        await runner.cleanup()


async def submit(session: aiohttp.ClientSession, stack: Stack, key: str, callback: str) -> str:
    body = {"model": "gpu-sim", "prompt": "call me back", "callback": callback}
    async with session.post(f"{stack.api}/async-infer", json=body, headers={"x-api-key": key}) as response:
        assert response.status == 202, await response.text()
        return str((await response.json())["jobId"])


async def slowest_delivery(
    session: aiohttp.ClientSession, stack: Stack, key: str, receiver: TimingReceiver
) -> float:
    """QUICK jobs submitted at once, each with a callback to the receiver: the longest any took from its
    submission until its callback arrived (s)."""

    async def one() -> float:
        start = time.monotonic()
        job_id = await submit(session, stack, key, receiver.url)
        await eventually(lambda: job_id in receiver.arrived, f"job {job_id}'s callback", RETRIES_S)
        return receiver.arrived[job_id] - start

    return max(await asyncio.gather(*(one() for _ in range(QUICK))))


@PLAIN_REDIS_ONLY
async def test_a_tenants_slow_receivers_on_many_aliases_do_not_delay_another_tenants_callbacks(
    stack: Stack,
):
    suffix = uuid.uuid4().hex[:8]
    flooder, quick = new_tenant_key(stack, f"flooder-{suffix}"), new_tenant_key(stack, f"quick-{suffix}")
    slow, fast = HoldingReceiver(), TimingReceiver()
    async with (
        serving(slow.handle, "0.0.0.0") as slow_port,  # every loopback alias reaches it
        serving(fast.handle, "127.0.0.1") as fast_port,
        aiohttp.ClientSession() as session,
    ):
        fast.url = f"http://127.0.0.1:{fast_port}/hook"
        await slowest_delivery(session, stack, quick, fast)  # the tenant's first jobs: not the measure
        unloaded = await slowest_delivery(session, stack, quick, fast)

        flood = [f"http://{ALIASES[i % len(ALIASES)]}:{slow_port}/hook" for i in range(FLOOD)]
        await asyncio.gather(*(submit(session, stack, flooder, url) for url in flood))
        await eventually(
            lambda: slow.held >= LIMITS.callback_max_per_tenant, "the flooder's receivers hold its share", 60
        )
        try:
            loaded = await slowest_delivery(session, stack, quick, fast)
            most_held = slow.most_held
        finally:
            slow.released.set()

    assert most_held == LIMITS.callback_max_per_tenant  # the flood never held more of the manager
    assert loaded <= LOADED_OVER_UNLOADED * unloaded, (loaded, unloaded)


async def test_a_callback_to_an_address_outside_the_allowlist_is_refused_and_never_sent(stack: Stack):
    """The stack allowlists 127.0.0.0/8 for its receivers; IPv6 loopback is not in it."""
    receiver = TimingReceiver()
    async with (
        serving(receiver.handle, "::1") as port,
        aiohttp.ClientSession(headers={"x-api-key": stack.api_key}) as session,
    ):
        url = f"http://[::1]:{port}/hook"
        job_id = await submit(session, stack, stack.api_key, url)

        async def settled() -> bool:
            async with session.get(f"{stack.api}/results/{job_id}") as response:
                view = await response.json()
            return bool(view.get("callback", {}).get("status") != "pending")

        await eventually(settled, "the callback settled", RETRIES_S)
        async with session.get(f"{stack.api}/results/{job_id}") as response:
            view = await response.json()

    assert view["callback"] == {
        "url": url,
        "status": "undeliverable",
        "attempts": 1,
        "lastError": "connection refused by policy",
    }
    assert receiver.arrived == {}
