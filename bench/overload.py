"""Overload: the gateway's capacity, then twice that offered open-loop. Past its capacity a server
should refuse quickly and keep its goodput; offered 400 jobs/s against about 280, the gateway once
completed 84/s and left some 9,000 requests unanswered 30 s after the last send.

Capacity is what `CAPACITY_CLIENTS` closed-loop clients complete a second (a job is a POST and its
long-poll GETs; gpu-sim's one worker serves far more than the gateway, so the gateway is what is
measured). Then Poisson arrivals at `OVERLOAD` times that rate for the run: a submission refused with
503 is answered (the client would retry after Retry-After; an open loop does not), a long-poll refused
with 429 or 503 is asked again after its Retry-After. Goodput: jobs completed a second, from the first
send to the last completion. Unanswered: requests still open `DRAIN_TIMEOUT_S` after the last send, or
cut off.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from bench.loadgen import DRAIN_TIMEOUT_S, GAVE_UP, HttpTarget, Run, closed_loop, open_loop
from bench.measure import pct
from bench.report import OVERLOAD_GOODPUT
from bench.scenarios import STANDARD, Options, Section, start_synapse
from bench.stack import API_KEY, BenchStack

# Enough clients to keep the gateway busy although each waits out its job's batch; more (800) measured
# less on 2 cores, the clients' own CPU taken from the gateway's.
CAPACITY_CLIENTS = 256
CAPACITY_S = 10.0
OVERLOAD = 2.0


def goodput(run: Run) -> float:
    """Jobs completed a second, from the first send to the last completion (or the end of the sending)."""
    done = [s.done for s in run.samples if s.ok]
    span = max([run.duration_s, *done])
    return len(done) / span


def unanswered(run: Run) -> int:
    """Requests with no HTTP answer: still open at the drain's end, or cut off (a client error)."""
    return sum(1 for s in run.samples if s.error == GAVE_UP or (s.error and not s.error[0].isdigit()))


async def _capacity(api: str, progress: bool) -> Run:
    target = HttpTarget(api, API_KEY)
    try:
        return await closed_loop(target, CAPACITY_CLIENTS, CAPACITY_S, progress=progress)
    finally:
        await target.aclose()


async def _overload(api: str, rate: float, duration_s: float, progress: bool) -> Run:
    target = HttpTarget(api, API_KEY)
    try:
        return await open_loop(target, rate, duration_s, progress=progress)
    finally:
        await target.aclose()


def overload(opts: Options) -> Section:
    duration_s = opts.run_s
    with BenchStack(opts.out / "raw" / "overload") as stack:
        stack.start_redis()
        start_synapse(stack, STANDARD, "overload")
        stack.start_gateway()
        measured = asyncio.run(_capacity(stack.api, opts.progress))
        capacity = goodput(measured)
        if capacity <= 0:
            raise RuntimeError("the gateway completed no job in the capacity run: see its log")
        rate = OVERLOAD * capacity
        run = asyncio.run(_overload(stack.api, rate, duration_s, opts.progress))
    served = goodput(run)
    outcomes = Counter(("completed" if s.ok else s.error or "no answer") for s in run.samples)
    latencies = [s.latency_s * 1000 for s in run.samples if s.ok]
    lost = unanswered(run)
    rows = "\n".join(f"| {outcome} | {count:,} |" for outcome, count in outcomes.most_common())
    markdown = f"""The local gateway with one gpu-sim worker (T(b) = 100 ms, b <= 100: far more than the
gateway serves). Capacity: {CAPACITY_CLIENTS} closed-loop clients for {CAPACITY_S:g} s, each job a
`POST /async-infer` and its `GET /results/{{id}}?wait=20`. Then Poisson arrivals at {OVERLOAD:g} times
that for {duration_s:g} s, open loop; a submission refused with 503 counts as answered, a refused
long-poll (429, 503) is asked again after its `Retry-After`.

| figure | value |
| --- | --- |
| capacity (closed loop) | {capacity:,.0f} jobs/s |
| offered | {rate:,.0f} jobs/s ({len(run.samples):,} jobs) |
| goodput (first send to last completion) | {served:,.0f} jobs/s ({served / capacity:.0%} of capacity) |
| completed jobs' latency P50 / P99 | {pct(latencies, 50):,.0f} / {pct(latencies, 99):,.0f} ms |
| unanswered ({DRAIN_TIMEOUT_S:g} s after the last send, or cut off) | {lost:,} |

| outcome of an offered job | jobs |
| --- | --- |
{rows}
"""
    key = {OVERLOAD_GOODPUT: served / capacity, "overload_unanswered": float(lost)}
    return Section("Overload: twice the gateway's capacity", markdown, key=key)
