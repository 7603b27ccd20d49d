"""No tenant's long-polls delay another's, and past its capacity the gateway sheds load and keeps
answering (issue 30, points 4 and 10), on the local stack with gateways of the tests' own.

Fair waits: a gateway holding `WAITS` long-polls, `SHARE` per tenant. Tenant A opens more long-polls
than the whole gateway holds, on a job no worker serves (each would wait its whole 20 s); in one FIFO
pool, tenant B's half-second polls and its cancels queued behind them for seconds. Now A gets 429 past
its share, and B's polls and cancels take about what they take on an idle gateway: a loaded median
within `POLL_RATIO` (polls) and `CANCEL_RATIO` (cancels) of the unloaded one, measured in the same test.

Overload: a gateway running `BUSY` requests at once, with as many waiting for a thread, is flooded
with `FLOOD` requests at the same time. Every request gets an answer (none hangs), the refusals are
503 `overloaded` with Retry-After and a JSON body, nothing else is a 5xx, and a well-behaved client
(one request at a time, waiting out Retry-After) gets every one of its jobs accepted and completed
during the flood.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from bench.long_polls import waiting_polls
from tests.integration.conftest import PLAIN_REDIS_ONLY, Stack
from tests.integration.helpers import start_gateway, with_unserved_model
from tests.integration.tenants import new_tenant_key
from tests.processes import stop

pytestmark = [pytest.mark.integration, PLAIN_REDIS_ONLY]  # the front door's HTTP behaviour, not the store's

HELD = "held-model"  # no worker serves it: a long-poll of one of its jobs waits its whole wait
WAITS, SHARE = 60, 40
HOG_POLLS = 2 * WAITS  # more than the whole gateway holds: in one FIFO pool, B's polls queued behind
SAMPLES = 5
# B's polls wait 0.5 s each, so the ratio leaves a busy 2-core machine room; a cancel takes a few ms
# unloaded, where scheduling noise weighs more, and behind 20 s polls it took seconds.
POLL_RATIO = 3.0
CANCEL_RATIO = 20.0
BUSY = 4
FLOOD = 400  # requests at once, in each wave
POLITE_JOBS = 10


@pytest.fixture(scope="module")
def fair_gateway(stack: Stack) -> Iterator[str]:
    settings = {
        **with_unserved_model(stack, HELD),
        "gateway_long_waits": str(WAITS),
        "gateway_long_waits_per_tenant": str(SHARE),
    }
    proc, base = start_gateway(stack.env, stack.api_key, stack.logs, "gateway-fair-waits", **settings)
    yield base
    stop(proc)


@pytest.fixture(scope="module")
def busy_gateway(stack: Stack) -> Iterator[str]:
    proc, base = start_gateway(
        stack.env, stack.api_key, stack.logs, "gateway-overload",
        gateway_concurrency=str(BUSY), gateway_queue=str(BUSY),
    )  # fmt: skip
    yield base
    stop(proc)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(limit=0)  # every request of a flood open at once
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as client:
        yield client


async def held_job(session: aiohttp.ClientSession, base: str, key: str) -> str:
    body = {"model": HELD, "prompt": "wait", "timeoutMs": 120_000}
    async with session.post(f"{base}/async-infer", json=body, headers={"x-api-key": key}) as reply:
        assert reply.status == 202, await reply.text()
        return str((await reply.json())["jobId"])


async def timed(session: aiohttp.ClientSession, method: str, url: str, key: str) -> tuple[float, int]:
    started = time.monotonic()
    async with session.request(method, url, headers={"x-api-key": key}) as reply:
        await reply.read()
        return time.monotonic() - started, reply.status


async def b_medians(session: aiohttp.ClientSession, base: str, key: str) -> tuple[float, float]:
    """The medians of B's half-second polls and of its cancels, each of a fresh held job."""
    polls, cancels = [], []
    for _ in range(SAMPLES):
        job_id = await held_job(session, base, key)
        took, status = await timed(session, "GET", f"{base}/results/{job_id}?wait=0.5", key)
        assert status == 200
        polls.append(took)
        took, status = await timed(session, "POST", f"{base}/jobs/{job_id}/cancel", key)
        assert status in (200, 202)
        cancels.append(took)
    return statistics.median(polls), statistics.median(cancels)


async def test_one_tenants_long_polls_leave_anothers_polls_and_cancels_prompt(
    stack: Stack, fair_gateway: str, session: aiohttp.ClientSession
):
    hog, fair = new_tenant_key(stack, "poll-hog"), new_tenant_key(stack, "poll-fair")
    unloaded_poll, unloaded_cancel = await b_medians(session, fair_gateway, fair)

    hog_job = await held_job(session, fair_gateway, hog)
    url = f"{fair_gateway}/results/{hog_job}?wait=20"
    hog_polls = [asyncio.create_task(timed(session, "GET", url, hog)) for _ in range(HOG_POLLS)]
    refused = [task for task in asyncio.as_completed(hog_polls)]
    statuses = [(await task)[1] for task in refused[: HOG_POLLS - SHARE]]  # the first to answer: refusals
    assert statuses.count(429) == HOG_POLLS - SHARE, statuses
    async with session.get(url, headers={"x-api-key": hog}) as over_share:
        assert over_share.status == 429
        assert int(over_share.headers["Retry-After"]) >= 1
        body = await over_share.json()
        assert body["error"]["code"] == "too_many_waits"
        assert "SYNAPSE_GATEWAY_LONG_WAITS_PER_TENANT" in body["error"]["message"]

    loaded_poll, loaded_cancel = await b_medians(session, fair_gateway, fair)
    assert loaded_poll <= POLL_RATIO * unloaded_poll, (loaded_poll, unloaded_poll)
    assert loaded_cancel <= CANCEL_RATIO * unloaded_cancel, (loaded_cancel, unloaded_cancel)
    async with session.post(f"{fair_gateway}/jobs/{hog_job}/cancel", headers={"x-api-key": hog}) as done:
        assert done.status in (200, 202)
    held = [await task for task in refused[HOG_POLLS - SHARE :]]  # the share: answered when A's job ended
    assert all(status == 200 for _, status in held), held


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError(f"/proc/{pid}/status has no thread count")


@pytest.fixture
def own_gateway(stack: Stack) -> Iterator[tuple[str, int]]:
    """A fresh gateway (no thread kept from earlier requests), with the fair gateway's shares."""
    settings = {
        **with_unserved_model(stack, HELD),
        "gateway_long_waits": str(WAITS),
        "gateway_long_waits_per_tenant": str(SHARE),
    }
    proc, base = start_gateway(stack.env, stack.api_key, stack.logs, "gateway-poll-burst", **settings)
    yield base, proc.pid
    stop(proc)


async def test_long_polls_of_one_job_hold_no_thread_or_connection_each_and_all_answer_its_end(
    stack: Stack, own_gateway: tuple[str, int], session: aiohttp.ClientSession
):
    """A tenant's share of long-polls on one job: each used to hold a gateway thread and a Redis
    connection for its whole wait (a burst of 3,000 started a thousand threads, and another tenant's
    poll waited seconds: issue 41). Now the job's end is read once for all of them, on the event loop."""
    base, pid = own_gateway
    key = new_tenant_key(stack, "one-job-polls")
    job_id = await held_job(session, base, key)
    redis = stack.redis()
    threads_before, blocked_before = threads_of(pid), waiting_polls(redis)
    url = f"{base}/results/{job_id}?wait=20"
    polls = [asyncio.create_task(timed(session, "GET", url, key)) for _ in range(SHARE + 1)]
    done, _ = await asyncio.wait(polls, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    assert done, "no poll was refused: the tenant's share was never all admitted"
    _, first_status = done.pop().result()
    assert first_status == 429, f"the first poll to answer did so with {first_status}, not the refusal"
    polls = [poll for poll in polls if not poll.done()]
    most_threads, most_blocked = 0, 0
    for _ in range(10):  # a second of the polls waiting
        most_threads = max(most_threads, threads_of(pid) - threads_before)
        most_blocked = max(most_blocked, waiting_polls(redis) - blocked_before)
        await asyncio.sleep(0.1)
    assert most_blocked == 1, f"{most_blocked} connections blocked for {SHARE} polls of one job"
    assert most_threads < SHARE // 2, f"{most_threads} more gateway threads for {SHARE} polls"
    assert not any(poll.done() for poll in polls), "a poll ended before its job did"

    async with session.post(f"{base}/jobs/{job_id}/cancel", headers={"x-api-key": key}) as cancelled:
        assert cancelled.status in (200, 202)
    ended = await asyncio.gather(*polls)
    assert all(status == 200 for _, status in ended), ended
    async with session.get(f"{base}/results/{job_id}", headers={"x-api-key": key}) as final:
        assert (await final.json())["status"] == "CANCELLED"
    assert max(took for took, _ in ended) < 20, "a poll waited its whole wait although its job had ended"


async def polite_jobs(session: aiohttp.ClientSession, base: str, key: str) -> list[str]:
    """POLITE_JOBS gpu-sim jobs, one request at a time, each 503 retried after its Retry-After."""
    statuses = []
    for index in range(POLITE_JOBS):
        body = {"model": "gpu-sim", "prompt": f"polite {index}"}
        while True:
            async with session.post(f"{base}/async-infer", json=body, headers={"x-api-key": key}) as reply:
                if reply.status != 503:
                    assert reply.status == 202, await reply.text()
                    job_id = str((await reply.json())["jobId"])
                    break
                await asyncio.sleep(float(reply.headers["Retry-After"]))
        while True:
            url = f"{base}/results/{job_id}?wait=5"
            async with session.get(url, headers={"x-api-key": key}) as reply:
                if reply.status == 503:
                    await asyncio.sleep(float(reply.headers["Retry-After"]))
                    continue
                view = await reply.json()
            if view["status"] in ("COMPLETED", "FAILED", "CANCELLED"):
                statuses.append(view["status"])
                break
    return statuses


async def test_a_flooded_gateway_answers_everyone_and_serves_a_polite_client(
    stack: Stack, busy_gateway: str, session: aiohttp.ClientSession
):
    flooder, polite = new_tenant_key(stack, "flooder"), new_tenant_key(stack, "polite")

    async def flood_one(index: int) -> tuple[int, str, dict[str, object]]:
        url = f"{busy_gateway}/results/not-a-job-{index}"
        async with session.get(url, headers={"x-api-key": flooder}) as reply:
            return reply.status, reply.headers.get("Retry-After", ""), await reply.json()

    polite_run = asyncio.create_task(polite_jobs(session, busy_gateway, polite))
    answers: list[tuple[int, str, dict[str, object]] | BaseException] = []
    while not polite_run.done():  # wave after wave, for as long as the polite client is at work
        answers += await asyncio.gather(*(flood_one(i) for i in range(FLOOD)), return_exceptions=True)
    served = await polite_run

    assert served == ["COMPLETED"] * POLITE_JOBS
    hung = [a for a in answers if isinstance(a, BaseException)]
    assert not hung, hung[:3]
    replies = [a for a in answers if not isinstance(a, BaseException)]
    shed = [r for r in replies if r[0] == 503]
    assert shed, "the flood never passed the gateway's bound: the test proves nothing"
    assert {status for status, _, _ in replies} <= {404, 503}
    for _, retry_after, body in shed:
        assert int(retry_after) >= 1
        assert isinstance(body["error"], dict) and body["error"]["code"] == "overloaded"
