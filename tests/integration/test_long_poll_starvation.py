"""Long-polls must not starve the gateway: while more `GET /results/{id}?wait=20` wait on jobs that will not
finish than the gateway has threads for its other requests, submissions and health checks are answered,
each before the polls' wait ends (one pool for everything once kept them waiting up to 19 s behind the
polls).

The gateway is the test's own, with pools scaled down ten-fold (`GENERAL_THREADS` for requests, `WAIT_THREADS`
for waits): `POLLS` is more than the general pool holds, so a gateway that ran polls there would starve
its submissions, as one pool did with 1,500 polls and the 1,100 threads it then had. The benchmark
(`synapse bench longpolls`) measures the full scale: 2,000 polls beside 100 submissions a second. The
polls wait on parked jobs: job hashes in QUEUED with no stream
entry, which no manager reads, so each poll blocks for its whole wait. The gateway's waits start cold
(each job's first wait opens a Redis connection, kept for later ones); a first round warms them, so that the
measured round opens quickly and its polls are all waiting when the submissions go in. A measured round
whose polls are not all waiting within 12 s is reported (a warning, with what the others came to) and
opened again, up to three times (a busy 2-core machine opens a cold round at about 50 polls a second).
"""

from __future__ import annotations

import asyncio
import os
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest

from bench.long_polls import WAIT_S, open_polls, park, release, released, warm_up
from local_stack.cli import raise_file_limit
from tests.integration.conftest import PLAIN_REDIS_ONLY, Stack
from tests.integration.helpers import start_gateway
from tests.processes import stop

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    PLAIN_REDIS_ONLY,
]  # the front door's HTTP behaviour, not the store's

# The gateway's pools (SYNAPSE_GATEWAY_CONCURRENCY, SYNAPSE_GATEWAY_LONG_WAITS), a tenth of the defaults.
GENERAL_THREADS = 110
WAIT_THREADS = 410
POLLS = 2 * GENERAL_THREADS  # more than the general pool holds: on it, they would starve the rest
SUBMISSIONS = 20
HEALTH_CHECKS = 5
FINAL = {"COMPLETED", "FAILED"}
# A round whose polls are not all waiting in time is reported, released and opened again: what this
# test checks is the submissions beside the polls; how fast polls open is the benchmark's figure. A
# round has 60 % of the polls' wait to open, which leaves the submissions 8 s before any poll can end.
ROUNDS = 3
OPEN_WITHIN_S = 0.6 * WAIT_S
# A cold gateway opens a Redis connection for each job's first wait, so one warm-up round may leave some
# cold; warm-up rounds go on until one opens whole, at most this many.
WARM_UP_ROUNDS = 3


# At import, before the session's Redis and gateway start, as `synapse gateway` does for itself.
raise_file_limit()


@pytest.fixture
def gateway(stack: Stack) -> Iterator[Gateway]:
    """A gateway of the test's own on the session's Redis and manager, with the pools above. At 1,500 polls
    and the default pools, CI twice saw a warm-up round open whole and later rounds never open (0 of 1,500
    waiting after 12 s, the gateway's threads growing from 1,768 to 2,919), which a run here did not
    reproduce: a gateway defect of its own, left to the overload work (issue 30)."""
    pools = {
        "gateway_concurrency": str(GENERAL_THREADS), "gateway_long_waits": str(WAIT_THREADS),
        "gateway_long_waits_per_tenant": str(WAIT_THREADS),
    }  # fmt: skip
    proc, api = start_gateway(stack.env, stack.api_key, stack.logs, "gateway-starvation", **pools)
    yield Gateway(api, proc.pid)
    stop(proc)


@dataclass(frozen=True)
class Gateway:
    api: str
    pid: int

    def state(self) -> str:
        """Its threads and open descriptors, for a report of a round that did not open."""
        try:
            threads = next(
                line.split()[1] for line in Path(f"/proc/{self.pid}/status").read_text().splitlines()
                if line.startswith("Threads:")
            )  # fmt: skip
            return f"gateway threads {threads}, descriptors {len(os.listdir(f'/proc/{self.pid}/fd'))}"
        except OSError as exc:
            return f"gateway state unknown: {exc}"


@pytest.fixture
def parked(stack: Stack) -> Iterator[list[str]]:
    """Job ids whose long-polls wait their whole wait; released (and removed) afterwards."""
    client = stack.redis()
    ids: list[str] = []
    yield ids
    release(client, ids)


@pytest.fixture
async def session(stack: Stack) -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(limit=0)  # one connection per poll, as many clients would hold
    timeout = aiohttp.ClientTimeout(total=WAIT_S + 40)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, headers={"x-api-key": stack.api_key}
    ) as s:
        yield s


@dataclass
class Tally:
    """What the requests made beside the polls came to; `stuck` returned after the polls' wait ended."""

    deadline: float
    job_ids: list[str] = field(default_factory=list)
    healthy: int = 0
    failed: int = 0
    stuck: int = 0

    def answered(self, ok: bool) -> None:
        self.failed += not ok
        self.stuck += time.monotonic() >= self.deadline


async def submit(session: aiohttp.ClientSession, api: str, index: int, tally: Tally) -> None:
    body = {"model": "gpu-sim", "prompt": f"beside the polls {index}"}
    try:
        async with session.post(f"{api}/async-infer", json=body) as response:
            payload = await response.json()
    except (aiohttp.ClientError, TimeoutError):
        tally.answered(False)
        return
    tally.answered(response.status == 202)
    if response.status == 202:
        tally.job_ids.append(payload["jobId"])


async def health(session: aiohttp.ClientSession, api: str, tally: Tally) -> None:
    try:
        async with session.get(f"{api}/healthz") as response:
            ok = response.status == 200 and (await response.json())["status"] == "ok"
    except (aiohttp.ClientError, TimeoutError):
        ok = False
    tally.answered(ok)
    tally.healthy += ok


async def outcomes(stack: Stack, job_ids: list[str]) -> list[str]:
    """Each job's final status, or "" if it has none after a full wait (lost)."""
    async with aiohttp.ClientSession(headers={"x-api-key": stack.api_key}) as session:

        async def final(job_id: str) -> str:
            for _ in range(3):
                async with session.get(f"{stack.api}/results/{job_id}?wait={WAIT_S:g}") as response:
                    status = str((await response.json()).get("status", ""))
                if status in FINAL:
                    return status
            return ""

        return list(await asyncio.gather(*(final(job_id) for job_id in job_ids)))


async def test_submissions_and_health_checks_are_not_stuck_behind_long_polls(
    stack: Stack, gateway: Gateway, parked: list[str], session: aiohttp.ClientSession
):
    api, client = gateway.api, stack.redis()
    for _ in range(WARM_UP_ROUNDS):
        warm = await warm_up(session, api, client, POLLS)
        if warm.waiting == POLLS:
            break
    for attempt in range(1, ROUNDS + 1):
        parked += (ids := park(client, POLLS))
        started = time.monotonic()
        polls = await open_polls(session, api, client, ids, within_s=OPEN_WITHIN_S)
        if polls.waiting == POLLS or attempt == ROUNDS:
            break
        # A warning, not a print: pytest shows it in the summary of a run that passes.
        warnings.warn(
            f"round {attempt} of long-polls set aside: {polls.waiting} of {POLLS} waiting after "
            f"{polls.open_s:.1f} s; the rest: {polls.not_waiting} ({gateway.state()})",
            stacklevel=1,
        )
        await released(client, polls, ids)
    tally = Tally(deadline=started + WAIT_S)  # no poll's wait can end before this
    await asyncio.gather(
        *(submit(session, api, i, tally) for i in range(SUBMISSIONS)),
        *(health(session, api, tally) for _ in range(HEALTH_CHECKS)),
    )
    returned_early = await polls.close()
    release(client, ids)

    statuses = await outcomes(stack, tally.job_ids)
    completed, failed_jobs = statuses.count("COMPLETED"), statuses.count("FAILED")
    lost = statuses.count("")
    print(
        f"\nFAULT-TALLY starvation: accepted={len(tally.job_ids)} completed={completed} "
        f"failed={tally.failed + failed_jobs} lost={lost} stuck={tally.stuck} "
        f"(polls waiting={polls.waiting}/{POLLS} after {polls.open_s:.1f} s in round {attempt}, "
        f"warm-up {warm.waiting}/{POLLS} after {warm.open_s:.1f} s; "
        f"health ok={tally.healthy}/{HEALTH_CHECKS})"
    )
    # The precondition first: submissions sent while polls still open say nothing of the pools.
    assert polls.waiting == POLLS, (
        f"in {ROUNDS} rounds, never all {POLLS} long-polls waiting within {OPEN_WITHIN_S:g} s; "
        f"in the last, {polls.waiting} were and the rest: {polls.not_waiting} ({gateway.state()})"
    )
    assert tally.stuck == 0, "requests returned only after the long-polls' wait ended: stuck behind them"
    assert returned_early == 0, "long-polls returned before their wait ended: they were not holding"
    assert tally.failed == 0 and tally.healthy == HEALTH_CHECKS
    assert len(tally.job_ids) == SUBMISSIONS
    assert (completed, failed_jobs, lost) == (SUBMISSIONS, 0, 0)
