"""Scenarios 1 and 2: sustained load on Synapse (direct and HTTP) and on the two baselines, in one
run on one machine; and closed-loop runs (fixed numbers of clients) through HTTP."""

from __future__ import annotations

import asyncio
import math
import os

from bench import plots
from bench.baselines import baseline_dynamic, baseline_naive
from bench.loadgen import HttpTarget, Run, closed_loop
from bench.measure import Figures
from bench.report import figures_table, sustained_markdown
from bench.scenarios import (
    LINEAR,
    MAX_BATCH,
    STANDARD,
    STOP_S,
    Options,
    Section,
    calibrate,
    figures_of,
    measure_synapse,
    predicted,
    start_synapse,
    stop_synapse,
)
from bench.stack import API_KEY, BenchStack, cpu_seconds
from planner.simulator import SimResult

CLOSED_LOOP_CLIENTS = (16, 128)
ONE_IN_FLIGHT = "Synapse direct, 1 batch in flight"


def sustained(opts: Options) -> Section:
    """Scenario 1 and 2 in one run: Synapse direct and HTTP (and direct with one batch in flight per
    worker), the linear profile, and both baselines."""
    rate = opts.load * STANDARD.capacity(MAX_BATCH)
    rows: list[Figures] = []
    sims: dict[str, SimResult] = {}
    with BenchStack(opts.out / "raw" / "sustained") as stack:
        stack.start_redis()
        cold_start = start_synapse(stack, STANDARD, "std")
        stack.start_gateway()
        overheads = calibrate(stack, STANDARD)
        for name, kind in (("Synapse direct", "direct"), ("Synapse HTTP", "http")):
            gateway_cpu = cpu_seconds(stack.pid("gateway"))
            figures, jobs = measure_synapse(name, kind, stack, rate, opts)
            if kind == "http":
                per_job = (cpu_seconds(stack.pid("gateway")) - gateway_cpu) / max(1, figures.sent)
                cores = f"{per_job * rate:.1f} cores at {rate:,.0f} jobs/s, on a machine of {os.cpu_count()}"
                figures.notes.append(
                    f"the local gateway used {per_job * 1000:.2f} ms of CPU per job (a POST and its "
                    f"long-poll GET): {cores}"
                )
            rows.append(figures)
            sims[name] = predicted(jobs, STANDARD, overheads)
        # The same load with one batch in flight per worker: what SYNAPSE_MAX_INFLIGHT_BATCHES costs.
        stack.stop("manager-std")
        stack.start_manager("manager-one", SYNAPSE_MAX_INFLIGHT_BATCHES="1")
        figures, jobs = measure_synapse(ONE_IN_FLIGHT, "direct", stack, rate, opts)
        rows.append(figures)
        sims[ONE_IN_FLIGHT] = predicted(jobs, STANDARD, overheads, max_inflight=1)
        stack.stop("manager-one")
        stack.stop("worker-std", timeout_s=STOP_S)
        linear_rate = opts.load * LINEAR.capacity(MAX_BATCH)
        start_synapse(stack, LINEAR, "lin")
        figures, jobs = measure_synapse(f"Synapse direct, T(b) = {LINEAR.describe()}", "direct", stack,
                                        linear_rate, opts)  # fmt: skip
        rows.append(figures)
        sims[figures.name] = predicted(jobs, LINEAR, overheads)
        stop_synapse(stack, "lin")
        rows.append(baseline_dynamic(stack, rate, opts))
        rows.append(baseline_naive(stack, rate, opts, cold_start))
    cdf = plots.latency_cdf(opts.out / "latency-cdf.png", {f.name: f.latencies_ms for f in rows})
    markdown = sustained_markdown(rows, sims, overheads, rate=rate, cdf=cdf)
    direct, http, one, _, dynamic, naive = rows
    key = {
        "p99_direct_ms": direct.p(99), "p99_http_ms": http.p(99), "busy_direct": direct.busy or 0.0,
        "p99_one_in_flight_ms": one.p(99),
        "lag_direct_ms": direct.send_lag_ms, "lag_http_ms": http.send_lag_ms, "lag_one_ms": one.send_lag_ms,
        "lag_dynamic_ms": dynamic.send_lag_ms,
        "p99_dynamic_ms": dynamic.p(99), "cost_direct": direct.cost_per_1000 or math.nan,
        "cost_naive": naive.cost_per_1000 or math.nan, "lost": float(sum(f.lost for f in rows[:3])),
        "cold_start_s": cold_start,
    }  # fmt: skip
    return Section("Sustained load and baselines (scenarios 1 and 2)", markdown, rows, key)


def closed(opts: Options) -> Section:
    """Closed loop: a fixed number of HTTP clients, each sending its next job when its last one returns."""
    rows: list[Figures] = []
    with BenchStack(opts.out / "raw" / "closed") as stack:
        stack.start_redis()
        start_synapse(stack, STANDARD, "closed")
        stack.start_gateway()
        for clients in CLOSED_LOOP_CLIENTS[:1] if opts.quick else CLOSED_LOOP_CLIENTS:

            async def body(n: int = clients) -> Run:
                target = HttpTarget(stack.api, API_KEY)
                try:
                    return await closed_loop(target, n, min(opts.run_s, 15.0), progress=opts.progress)
                finally:
                    await target.aclose()

            run = asyncio.run(body())
            figures, _ = figures_of(f"HTTP, {clients} clients", run, stack, opts)
            rows.append(figures)
    markdown = f"""Closed loop through the gateway, one worker with T(b) = 100 ms (b <= 100): each client
sends its next job as soon as its last result arrives, so the load follows the system's speed.

{figures_table(rows)}
"""
    return Section("Closed loop: fixed numbers of clients", markdown, rows)
