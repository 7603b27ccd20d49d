"""Overload: the gateway's capacity, then twice that offered open-loop. Past its capacity a server
should refuse quickly and keep its goodput; offered 400 jobs/s against about 280, the gateway once
completed 84/s and left some 9,000 requests unanswered 30 s after the last send.

Capacity is the highest rate of a sweep of open-loop steps (`SWEEP`, `STEP_S` each) that the gateway
keeps up with: every job completed, none refused, goodput within `KEPT_UP` of the offer and the P99
latency under `KEPT_UP_P99_S` (a job is a POST and its long-poll GETs; gpu-sim's one worker serves far
more than the gateway, so the gateway is what is measured). A closed loop measured less: its clients
each wait out their job, so it finds the clients' limit on a busy machine, not the gateway's. Then
Poisson arrivals at `OVERLOAD` times that rate for the run: a submission refused with 503 is answered
(the client would retry after Retry-After; an open loop does not), a long-poll refused with 429 or 503
is asked again after its Retry-After. Goodput: jobs completed a second, from the first send to the
last completion. Unanswered: requests still open `DRAIN_TIMEOUT_S` after the last send, or cut off.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from bench.loadgen import DRAIN_TIMEOUT_S, GAVE_UP, HttpTarget, Run, open_loop
from bench.measure import pct
from bench.report import OVERLOAD_GOODPUT
from bench.scenarios import STANDARD, Options, Section, start_synapse
from bench.stack import API_KEY, BenchStack

SWEEP = (50.0, 100.0, 150.0, 200.0, 250.0, 300.0, 400.0, 500.0, 650.0, 800.0)  # jobs/s
STEP_S = 8.0
KEPT_UP = 0.95
KEPT_UP_P99_S = 2.0  # a long-poll's own wait is gpu-sim's window and batch, a few hundred ms
OVERLOAD = 2.0


def goodput(run: Run) -> float:
    """Jobs completed a second, from the first send to the last completion (or the end of the sending)."""
    done = [s.done for s in run.samples if s.ok]
    span = max([run.duration_s, *done])
    return len(done) / span


def unanswered(run: Run) -> int:
    """Requests with no HTTP answer: still open at the drain's end, or cut off (a client error)."""
    return sum(1 for s in run.samples if s.error == GAVE_UP or (s.error and not s.error[0].isdigit()))


def kept_up(run: Run) -> bool:
    """Every job completed, none refused, goodput near the offer, the tail short."""
    done = [s for s in run.samples if s.ok]
    if not done or len(done) < len(run.samples):
        return False
    sent = len(run.samples) / run.duration_s  # what Poisson arrivals actually offered: a few % off the rate
    return goodput(run) >= KEPT_UP * sent and pct([s.latency_s for s in done], 99) < KEPT_UP_P99_S


async def _capacity(api: str, progress: bool) -> tuple[float, list[tuple[float, float, bool]]]:
    """The highest step of the sweep the gateway kept up with, and each step's (offered, goodput, kept)."""
    steps: list[tuple[float, float, bool]] = []
    capacity = 0.0
    for rate in SWEEP:
        target = HttpTarget(api, API_KEY)
        try:
            run = await open_loop(target, rate, STEP_S, progress=progress)
        finally:
            await target.aclose()
        kept = kept_up(run)
        steps.append((rate, goodput(run), kept))
        if not kept:
            break
        capacity = rate
    return capacity, steps


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
        capacity, steps = asyncio.run(_capacity(stack.api, opts.progress))
        if capacity <= 0:
            raise RuntimeError(f"the gateway kept up with no step of the sweep {steps}: see its log")
        rate = OVERLOAD * capacity
        run = asyncio.run(_overload(stack.api, rate, duration_s, opts.progress))
    served = goodput(run)
    outcomes = Counter(("completed" if s.ok else s.error or "no answer") for s in run.samples)
    latencies = [s.latency_s * 1000 for s in run.samples if s.ok]
    refused = [s.latency_s * 1000 for s in run.samples if s.error.startswith("503")]
    send_lag = [(s.sent - s.intended) * 1000 for s in run.samples]
    lost = unanswered(run)
    rows = "\n".join(f"| {outcome} | {count:,} |" for outcome, count in outcomes.most_common())
    sweep = "\n".join(
        f"| {rate:,.0f} | {served_at:,.0f} | {'yes' if kept else 'no'} |" for rate, served_at, kept in steps
    )
    markdown = f"""The local gateway with one gpu-sim worker (T(b) = 100 ms, b <= 100: far more than the
gateway serves), each job a `POST /async-infer` and its `GET /results/{{id}}?wait=20`. Capacity: the
highest open-loop rate ({STEP_S:g} s a step) the gateway kept up with: every job completed, none
refused, goodput at least {KEPT_UP:.0%} of the offer, P99 under {KEPT_UP_P99_S:g} s. Then Poisson
arrivals at {OVERLOAD:g} times that for {duration_s:g} s, open loop; a submission refused with 503
counts as answered, a refused long-poll (429, 503) is asked again after its `Retry-After`.

| offered jobs/s | goodput jobs/s | kept up |
| --- | --- | --- |
{sweep}

| figure | value |
| --- | --- |
| capacity (open-loop sweep) | {capacity:,.0f} jobs/s |
| offered | {rate:,.0f} jobs/s ({len(run.samples):,} jobs) |
| goodput (first send to last completion) | {served:,.0f} jobs/s ({served / capacity:.0%} of capacity) |
| completed jobs' latency P50 / P99 | {pct(latencies, 50):,.0f} / {pct(latencies, 99):,.0f} ms |
| refused submissions' answer time P50 / P99 | {pct(refused, 50):,.0f} / {pct(refused, 99):,.0f} ms |
| load generator's lag behind schedule P50 / P99 | {pct(send_lag, 50):,.0f} / {pct(send_lag, 99):,.0f} ms |
| unanswered ({DRAIN_TIMEOUT_S:g} s after the last send, or cut off) | {lost:,} |

| outcome of an offered job | jobs |
| --- | --- |
{rows}
"""
    key = {OVERLOAD_GOODPUT: served / capacity, "overload_unanswered": float(lost)}
    return Section("Overload: twice the gateway's capacity", markdown, key=key)
