"""Submissions beside long-polls: 2,000 `GET /results/{id}?wait=20` held open against the local stack
while jobs are submitted at 100/s for 10 s. The submissions' latency shows whether the polls starve
the gateway (with one thread pool for everything, 1,500 polls once held submissions up to 19 s).

The polls wait on parked jobs (QUEUED hashes with no stream entry, which no manager reads), so each
holds for its whole wait. The gateway's threads start cold (a new thread for each poll,
started as it comes); a first round of polls warms them, and its opening time is reported too.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass

import aiohttp
import redis

from bench.loadgen import Run, Sample, open_loop
from bench.measure import pct
from bench.scenarios import STANDARD, Options, Section, start_synapse, wait_drained
from bench.stack import API_KEY, BenchStack
from contract.jobs import Job
from contract.keys import done_key, job_key
from contract.redis_client import SyncRedis
from contract.settings import Settings

POLLS = 2000
RATE = 100.0  # submissions per second beside the polls
RUN_S = 10.0
WAIT_S = 20.0  # the longest wait the API allows
AIM_P99_MS = 100.0
# Cold threads each build their app first (about 100 a second on 2 cores), so the first polls of a
# cold round may end their wait before the last open.
COLD_OPEN_LIMIT_S = 3 * WAIT_S
PARK_TTL_S = 300
WHOLE_GATEWAY = Settings.model_fields["gateway_long_waits"].default  # the bench tenant's share of waits


class SubmitTarget:
    """`POST /async-infer` only: the submission's own latency, not the job's."""

    name = "submit"

    def __init__(self, session: aiohttp.ClientSession, api: str) -> None:
        self._session = session
        self._api = api

    async def call(self, index: int, sample: Sample) -> None:
        body = {"model": "gpu-sim", "prompt": f"beside the long-polls {index}"}
        async with self._session.post(f"{self._api}/async-infer", json=body) as response:
            payload = await response.json()
        sample.ok = response.status == 202
        sample.job_id = str(payload.get("jobId", "")) if sample.ok else ""
        sample.error = "" if sample.ok else str(response.status)

    async def aclose(self) -> None:
        """The session belongs to the caller."""


def park(client: SyncRedis, n: int) -> list[str]:
    """Jobs whose long-polls wait their whole wait: hashes in QUEUED that no stream entry announces."""
    pipe = client.pipeline(transaction=False)
    ids = []
    for _ in range(n):
        job = Job.new(model="gpu-sim", prompt="parked", max_tokens=1, timeout_ms=60_000)
        pipe.hset(job_key(job.id), mapping=job.hash_fields())
        pipe.expire(job_key(job.id), PARK_TTL_S)
        ids.append(job.id)
    pipe.execute()
    return ids


def release(client: SyncRedis, ids: list[str]) -> None:
    """Ends the gateway's waits on these jobs at once, then removes them. The done signal outlives any
    wait: a poll that read its job just before the release, and reached its blocking read seconds later
    on a busy gateway, finds the signal still there rather than waiting its whole wait."""
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.lpush(done_key(job_id), job_id)
        pipe.expire(done_key(job_id), int(2 * WAIT_S))
        pipe.delete(job_key(job_id))
    pipe.execute()


def waiting_polls(client: SyncRedis, key: str | None = None) -> int:
    """Connections blocked on a done-list right now: long-polls the gateway holds. On a cluster, those of
    the node that holds `key` (every key of the platform shares its slot)."""
    if isinstance(client, redis.RedisCluster):
        node = client.get_node_from_key(key or done_key(""))  # type: ignore[no-untyped-call]
        clients: list[dict[str, str]] = client.client_list(target_nodes=node)  # type: ignore[assignment]
    else:
        clients = client.client_list()  # type: ignore[assignment]
    return sum(1 for c in clients if c.get("cmd") == "blmove" and "b" in c.get("flags", ""))


def fates(tasks: list[asyncio.Task[int]], waiting: int) -> str:
    """What the polls that are not waiting came to, for a report: answered (by HTTP status), failed (by
    error), or still opening."""
    counts: Counter[str] = Counter()
    for task in tasks:
        if not task.done():
            counts["still opening"] += 1
        elif (error := task.exception()) is not None:
            counts[f"failed: {type(error).__name__}: {error}"[:120]] += 1
        else:
            counts[f"answered {task.result()}"] += 1
    counts["still opening"] -= waiting  # a waiting poll has not returned either
    return ", ".join(f"{n} {fate}" for fate, n in counts.most_common() if n > 0) or "none"


@dataclass
class Polls:
    """A round of long-polls: their tasks, and as opening ended (after `open_s`) how many were waiting,
    how many had returned, and what those not waiting came to."""

    tasks: list[asyncio.Task[int]]
    waiting: int
    returned: int
    not_waiting: str
    open_s: float

    async def close(self) -> int:
        """Cancels the polls; returns how many had already returned (none should have)."""
        early = sum(task.done() for task in self.tasks)
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        return early


async def open_polls(
    session: aiohttp.ClientSession, api: str, client: SyncRedis, ids: list[str], within_s: float = WAIT_S
) -> Polls:
    """A long-poll per job; returns once each is waiting in Redis or has returned, or after `within_s`
    (by default once the first could end)."""

    async def poll(job_id: str) -> int:
        async with session.get(f"{api}/results/{job_id}?wait={WAIT_S:g}") as response:
            await response.read()
            return response.status

    started = time.monotonic()
    tasks = [asyncio.create_task(poll(job_id)) for job_id in ids]
    while (waiting := waiting_polls(client)) + (returned := sum(t.done() for t in tasks)) < len(ids):
        if time.monotonic() - started >= within_s:
            break
        await asyncio.sleep(0.2)
    return Polls(tasks, waiting, returned, fates(tasks, waiting), time.monotonic() - started)


async def released(client: SyncRedis, polls: Polls, ids: list[str]) -> None:
    """Ends a round: its polls cancelled, their jobs released, and the gateway's threads free again
    (a wait the release did not end still ends by itself, so this never waits longer than one)."""
    await polls.close()
    release(client, ids)
    deadline = time.monotonic() + WAIT_S + 5
    while (waiting := waiting_polls(client)) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    if waiting:
        raise TimeoutError(f"{waiting} long-polls still wait {WAIT_S + 5:g} s after their jobs were released")


async def warm_up(session: aiohttp.ClientSession, api: str, client: SyncRedis, n: int) -> Polls:
    """One round of polls, released at once: a gateway thread warmed for each (a poll that ended its
    wait hands its thread on to a later one). Returns how it opened."""
    ids = park(client, n)
    polls = await open_polls(session, api, client, ids, COLD_OPEN_LIMIT_S)
    await released(client, polls, ids)
    return polls


@dataclass
class Result:
    run: Run
    cold: Polls
    polls: Polls
    returned_early: int

    def latencies_ms(self) -> list[float]:
        return [s.latency_s * 1000 for s in self.run.samples if s.ok]


async def measure(stack: BenchStack, run_s: float, progress: bool) -> Result:
    connector = aiohttp.TCPConnector(limit=0)  # a connection per poll, as that many clients would hold
    timeout = aiohttp.ClientTimeout(total=WAIT_S + 40)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, headers={"x-api-key": API_KEY}
    ) as s:
        client = stack.redis()
        cold = await warm_up(s, stack.api, client, POLLS)
        ids = park(client, POLLS)
        polls = await open_polls(s, stack.api, client, ids)
        run = await open_loop(SubmitTarget(s, stack.api), RATE, run_s, progress=progress)
        early = await polls.close()
        release(client, ids)
    return Result(run, cold, polls, early)


def markdown(result: Result) -> str:
    run, polls = result.run, result.polls
    latencies = result.latencies_ms()
    p50, p99 = pct(latencies, 50), pct(latencies, 99)
    failed = sum(not s.ok for s in run.samples)
    verdict = "met" if p99 < AIM_P99_MS else "**missed**"
    cold = result.cold
    overlap = (
        f"; before the last one opened, {cold.not_waiting}: a parked job's poll answers 200 once its "
        f"{WAIT_S:g} s wait ends"
        if cold.returned
        else ""
    )
    return f"""{POLLS:,} long-polls (`GET /results/{{id}}?wait={WAIT_S:g}` on jobs that stay QUEUED) held open
through the gateway, and beside them `POST /async-infer` at {RATE:g}/s (Poisson) for {run.duration_s:g} s;
latency counts from each submission's scheduled time. One worker (T(b) = 100 ms) and a manager run the
submitted jobs.

| long-polls waiting | submissions | failed | P50 ms | P99 ms | max ms | polls returned early |
| --- | --- | --- | --- | --- | --- | --- |
| {polls.waiting:,} / {POLLS:,} | {len(run.samples):,} | {failed:,} | {p50:,.1f} | {p99:,.1f} \
| {max(latencies, default=float("nan")):,.1f} | {result.returned_early:,} |

Aim: submission P99 under {AIM_P99_MS:g} ms while the polls wait: {verdict}. Opening the {POLLS:,} polls took
{cold.open_s:.1f} s on the gateway's cold threads (each started as its poll came{overlap})
and {polls.open_s:.1f} s once warm; the figures above are from the warm round.
"""


def long_polls(opts: Options) -> Section:
    """Submission latency with thousands of long-polls open: the gateway keeps them off its main pool."""
    run_s = min(opts.run_s, RUN_S)
    with BenchStack(opts.out / "raw" / "longpolls") as stack:
        stack.start_redis()
        start_synapse(stack, STANDARD, "longpolls")
        # Every poll is the bench key's tenant's: its share is the whole gateway's, as the polls are
        # what loads the gateway here, not another tenant (the integration tests check the shares).
        stack.start_gateway(SYNAPSE_GATEWAY_LONG_WAITS_PER_TENANT=str(WHOLE_GATEWAY))
        result = asyncio.run(measure(stack, run_s, opts.progress))
        wait_drained(stack)
    latencies = result.latencies_ms()
    p50, p99 = pct(latencies, 50), pct(latencies, 99)
    print(f"bench: longpolls: submit P50 {p50:.1f} ms, P99 {p99:.1f} ms beside {result.polls.waiting} polls")
    key = {"longpoll_submit_p50_ms": p50, "longpoll_submit_p99_ms": p99}
    return Section(f"Submissions beside {POLLS:,} long-polls", markdown(result), key=key)
