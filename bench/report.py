"""The report: Markdown tables per scenario, the targets with their verdicts, the machine they ran on."""

from __future__ import annotations

import math
import os
import platform
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.llm_figures import LlmRow
from bench.measure import (
    COST_FORMULA,
    LAG_NOTE_MS,
    NAIVE_FORMULA,
    Figures,
    SweepPoint,
    front_door_note,
    pct,
)
from planner.simulator import Overheads, SimResult

VALIDATION_TOLERANCE = 0.10
# A burst's first answer from zero against one worker's time to serve all its models (issue 41, item 7).
FIRST_ANSWER_RATIO = 1.25
# Another tenant's polls and cancels while one tenant's 3,000 long-polls arrive (issue 41, item 1).
TENANT_BURST_P99_S = 1.0


def machine() -> str:
    """CPU model, cores, memory and load: the context every figure needs."""
    model = "unknown CPU"
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as meminfo:
        mem_kb = int(meminfo.readline().split()[1])
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    system = f"{platform.system()} {platform.release()}, Python {platform.python_version()}"
    return (
        f"{model}, {os.cpu_count()} cores, {mem_kb / 1024**2:.0f} GiB memory; {system}; load average {load}"
    )


def describe(overheads: Overheads) -> str:
    round_trip = (overheads.send_s + overheads.reply_s) * 1e3
    return (
        f"read {overheads.read_s * 1e3:.1f} ms, round trip {round_trip:.1f} ms, the worker's own cost per "
        f"batch {overheads.exec_s * 1e3:.1f} ms beyond T(b)"
    )


def _ms(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:,.0f}"


def _money(value: float | None) -> str:
    return "—" if value is None or math.isnan(value) else f"${value:.5f}"


def figures_table(rows: Sequence[Figures]) -> str:
    head = (
        "| system | offered /s | throughput /s | P50 ms | P95 ms | P99 ms | job-timings P99 ms | batch sizes "
        "| worker busy | cost / 1,000 | sent | failed | lost |\n" + "| --- " * 13 + "|"
    )
    lines = [head]
    for f in rows:
        busy = "—" if f.busy is None else f"{f.busy:.0%}"
        offered = f"{f.offered_rate:,.0f}" if f.offered_rate else "closed loop"
        lines.append(
            f"| {f.name} | {offered} | {f.throughput:,.0f} | {_ms(f.p(50))} | {_ms(f.p(95))} "
            f"| {_ms(f.p(99))} | {_ms(pct(f.server_ms, 99))} | {f.batch_summary()} | {busy} "
            f"| {_money(f.cost_per_1000)} | {f.sent:,} | {f.failed:,} | {f.lost:,} |"
        )
    notes = [f"- {f.name}: {note}" for f in rows for note in f.notes]
    return "\n".join(lines + (["", *notes] if notes else []))


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return "—"
    return f"{a / b:.3f}"


def sustained_markdown(
    rows: Sequence[Figures], sims: dict[str, SimResult], overheads: Overheads, *, rate: float, cdf: Path
) -> str:
    direct, dynamic, naive = rows[0], rows[-2], rows[-1]
    ratio_lines = ["| Synapse direct / baseline | P99 | cost per 1,000 |", "| --- | --- | --- |"]
    for base in (dynamic, naive):
        ratio_lines.append(f"| / {base.name} | {_ratio(direct.p(99), base.p(99))} "
                           f"| {_ratio(direct.cost_per_1000, base.cost_per_1000)} |")  # fmt: skip
    sim_lines = [
        "| run | measured P50 / P99 (job timings) | simulated P50 / P99 | measured busy | simulated busy |",
        "| --- | --- | --- | --- | --- |",
    ]
    by_name = {f.name: f for f in rows}
    for name, sim in sims.items():
        f = by_name[name]
        measured = f"{_ms(pct(f.server_ms, 50))} / {_ms(pct(f.server_ms, 99))}"
        simulated = f"{_ms(sim.percentile_ms(50))} / {_ms(sim.percentile_ms(99))}"
        sim_lines.append(
            f"| {name} | {measured} | {simulated} | {(f.busy or 0):.0%} | {sim.busy_ratio:.0%} |"
        )
    return f"""One worker, the manager's default settings (except where a row says otherwise); offered load
{rate:,.0f} jobs/s, Poisson (80 % of the worker's batched capacity
with T(b) = 100 ms for b <= 100, i.e. 1,000 jobs/s); the linear-profile row offers 80 % of that
profile's capacity. Every system gets the same arrival process, in the same run. Latency is the client's:
from the moment a request was due (open loop, so queueing is not hidden) to the result in hand.

{figures_table(rows)}

{chr(10).join(ratio_lines)}

The simulator (`synapse plan`'s engine) on the same arrival times, with the per-batch overheads
measured on this stack ({describe(overheads)}):

{chr(10).join(sim_lines)}

The simulator leaves out the manager's own CPU time between a batch's return and the next cut
(writing outcomes, marking and sending the next batch). With two batches in flight the worker
always has the next one queued, so that time is hidden; with one it sits on the critical path and
the worker idles through it: there the simulator is optimistic, and the measured row is the answer.

![latency CDF]({cdf.name})

{COST_FORMULA}. The dynamic-batcher baseline is one GPU over the run, priced the same way, with no
manager. {NAIVE_FORMULA}.

{front_door_note()}.
"""


def sweep_markdown(points: Sequence[SweepPoint], png: Path) -> str:
    lines = ["| offered /s | measured P50 / P99 ms | simulated P50 / P99 ms | P99 error | measured busy "
             "| simulated busy | busy error |", "| --- " * 7 + "|"]  # fmt: skip
    for p in points:
        p99_err, busy_err = p.errors()
        m, s = p.typical.measured, p.typical.simulated
        lines.append(
            f"| {p.rate:,.0f} | {_ms(pct(m.server_ms, 50))} / {_ms(pct(m.server_ms, 99))} | "
            f"{_ms(s.percentile_ms(50))} / {_ms(s.percentile_ms(99))} | {p99_err:.1%} | {(m.busy or 0):.0%} "
            f"| {s.busy_ratio:.0%} | {busy_err:.1%} |"
        )
    overheads = points[0].overheads if points else Overheads()
    trials = len(points[0].trials) if points else 0
    return f"""Direct submission to one worker (T(b) = 100 ms, b <= 100) at three loads, {trials} runs
each; the simulator runs the manager's batching policy on each run's arrival times, with per-batch
overheads measured on this stack ({describe(overheads)}). Latency is the job timings' totalMs;
busy is the time the worker had a batch in flight over the run. The errors are the median over the
runs (one stall on a shared machine decides a short run's P99); the latencies and busy shares shown
are those of the run with the median P99 error. Target: both errors within {VALIDATION_TOLERANCE:.0%}.

{chr(10).join(lines)}

![latency and busy against offered load]({png.name})
"""


@dataclass(frozen=True)
class Target:
    what: str
    figure: str
    met: bool
    gap: str = ""
    doubt: str = ""  # why this run cannot judge the target, if it cannot


def _under(what: str, value: float, limit: float, *lags: float) -> Target:
    """A latency target; a load generator that fell behind makes the verdict inconclusive."""
    gap = f"{value - limit:+,.0f} ms over" if value >= limit else ""
    late = max((lag for lag in lags if not math.isnan(lag)), default=0.0)
    doubt = f"the load generator was up to {late:,.0f} ms late (P99)" if late > LAG_NOTE_MS else ""
    return Target(what, f"{value:,.0f} ms", value < limit, gap, doubt)


def targets(key: dict[str, float]) -> list[Target]:
    """The issue's targets, judged on the figures of this run (any that did not run are left out)."""
    found: list[Target] = []
    if "p99_direct_ms" in key:
        busy = key["busy_direct"]
        found.append(
            _under("P99 < 250 ms at 80 % load (direct)", key["p99_direct_ms"], 250, key["lag_direct_ms"])
        )
        found.append(_under("P99 < 250 ms at 80 % load (HTTP)", key["p99_http_ms"], 250, key["lag_http_ms"]))
        what_if = "P99 < 250 ms at 80 % load (direct, SYNAPSE_MAX_INFLIGHT_BATCHES=1)"
        found.append(_under(what_if, key["p99_one_in_flight_ms"], 250, key["lag_one_ms"]))
        found.append(Target("worker busy >= 70 % (aim 85 %)", f"{busy:.0%}", busy >= 0.70))
        saving = 1 - key["cost_direct"] / key["cost_naive"]
        found.append(
            Target("cost per 1,000 >= 90 % below naive (aim 95 %)", f"{saving:.1%} below", saving >= 0.90)
        )
        overhead = key["p99_direct_ms"] - key["p99_dynamic_ms"]
        lags = (key["lag_direct_ms"], key["lag_dynamic_ms"])
        found.append(_under("P99 overhead vs Triton's batcher <= 15 ms", overhead, 15.001, *lags))
    if "jobs_per_s" in key:
        rate = key["jobs_per_s"]
        gap = f"{rate / 5000:.0%} of the target" if rate < 5000 else ""
        found.append(
            Target(
                "manager >= 5,000 jobs/s on one core (aim 20,000)", f"{rate:,.0f} jobs/s", rate >= 5000, gap
            )
        )
    if "burst_lost" in key:
        ok = key["burst_lost"] == 0 and key["burst_late"] == 0
        figure = f"{key['burst_lost']:.0f} lost, {key['burst_late']:.0f} late"
        found.append(Target("burst from zero: nothing lost, all within deadline", figure, ok))
    if "tenant_burst_b_p99_s" in key:
        worst = key["tenant_burst_b_p99_s"]
        found.append(Target("another tenant's P99 during a 3,000-poll burst <= 1 s", f"{worst:.2f} s",
                            worst <= TENANT_BURST_P99_S))  # fmt: skip
    if "first_answer_ratio" in key:
        ratio = key["first_answer_ratio"]
        figure = f"{key['first_answer_s']:.1f} s vs {key['first_answer_alone_s']:.1f} s ({ratio:.2f}x)"
        found.append(Target("first answer from zero <= 1.25x one worker's time to serve all models", figure,
                            ratio <= FIRST_ANSWER_RATIO))  # fmt: skip
    found += llm_targets(key)
    found += embeddings_targets(key)
    found += structured_targets(key)
    found += overload_targets(key)
    found += batch_api_targets(key)
    if "validation_worst_error" in key:
        err = key["validation_worst_error"]
        found.append(
            Target(
                "planner within 10 % of measured (P99, busy)", f"worst {err:.1%}", err <= VALIDATION_TOLERANCE
            )
        )
    return found


def targets_table(found: Sequence[Target]) -> str:
    lines = ["| target | this run | verdict |", "| --- | --- | --- |"]
    for t in found:
        verdict = "met" if t.met else f"**missed** {t.gap}".rstrip()
        if t.doubt:
            verdict = f"inconclusive ({'met' if t.met else 'missed'} as measured, but {t.doubt})"
        lines.append(f"| {t.what} | {t.figure} | {verdict} |")
    return "\n".join(lines)


def _num(value: float, digits: int = 0) -> str:
    return "—" if math.isnan(value) else f"{value:,.{digits}f}"


@dataclass(frozen=True)
class LlmTarget:
    """`what`: the platform's engine path against `other` at `clients`; met when the ratio of the two
    figures is at least (throughput) or at most (latency) `ratio`. A path without answers misses; one
    whose requests failed leaves the verdict inconclusive, its figures being those of the rest. Judged
    only where both paths ran."""

    what: str
    figure: str  # "ttft_p50_ms" or "tps"
    other: str  # "static" or "alone"
    clients: int
    ratio: float

    def judge(self, key: Mapping[str, float]) -> Target | None:
        mine = key.get(f"llm_engine_{self.figure}_c{self.clients}")
        theirs = key.get(f"llm_{self.other}_{self.figure}_c{self.clients}")
        if mine is None or theirs is None:
            return None
        share = mine / theirs if theirs and not math.isnan(theirs) and not math.isnan(mine) else math.nan
        latency = self.figure.endswith("_ms")
        met = share <= self.ratio if latency else share >= self.ratio
        unit = "ms" if latency else "tok/s"
        figure = f"{_num(mine)} vs {_num(theirs)} {unit} ({_num(share, 2)}x {self.other})"
        gap = "" if met else f"(needs {'at most' if latency else 'at least'} {self.ratio:g}x)"
        return Target(
            self.what, figure, met, gap, _failed_requests(key, ("engine", self.other), (self.clients,))
        )


def _failed_requests(key: Mapping[str, float], sides: Sequence[str], levels: Sequence[int]) -> str:
    """Why failed requests make a verdict inconclusive, if any failed."""
    failed = [
        f"{key[f'llm_{side}_errors_c{c}']:,.0f} of the {side} path's requests failed at {c} clients"
        for side in sides
        for c in levels
        if key.get(f"llm_{side}_errors_c{c}", 0) > 0
    ]
    return " and ".join(failed)


LLM_TARGETS = (
    LlmTarget("LLM, 32 clients: TTFT P50 <= 1/4 of static batching's", "ttft_p50_ms", "static", 32, 0.25),
    LlmTarget("LLM, 32 clients: output tokens/s >= 1.5x static batching's", "tps", "static", 32, 1.5),
    LlmTarget("LLM, 1 client: TTFT P50 within 25 % of the engine alone", "ttft_p50_ms", "alone", 1, 1.25),
)
PER_CORE_RATIO = 0.9
PER_CORE_TARGET = (
    "LLM: output tokens per worker core-second >= 90 % of the engine alone's, at every concurrency"
)
# Targets of earlier versions of the LLM section: publishing the section removes their rows.
RETIRED_LLM_TARGETS = ("LLM, 32 clients: output tokens/s >= 70 % of the engine alone",)


def per_core_ratios(key: Mapping[str, float]) -> dict[int, float]:
    """The platform worker's output tokens per core-second over the engine alone's, by concurrency."""
    prefix = "llm_engine_tps_per_core_c"
    levels = sorted(int(k[len(prefix) :]) for k in key if k.startswith(prefix))
    return {
        c: key[f"{prefix}{c}"] / key[f"llm_alone_tps_per_core_c{c}"]
        for c in levels
        if key.get(f"llm_alone_tps_per_core_c{c}")
    }


def per_core_target(key: Mapping[str, float]) -> Target | None:
    """Output tokens per worker core-second against the engine alone's process, at every concurrency
    both ran: the platform's cost per token on the cores that serve the model, whatever else (aiperf,
    the gateway, Redis, the manager) shares this machine."""
    ratios = per_core_ratios(key)
    if not ratios:
        return None
    lowest = min(ratios, key=lambda c: -math.inf if math.isnan(ratios[c]) else ratios[c])
    met = all(r >= PER_CORE_RATIO for r in ratios.values())
    figure = ", ".join(f"{_num(r, 2)}x at {c}" for c, r in ratios.items())
    gap = (
        "" if met else f"(needs at least {PER_CORE_RATIO:g}x; lowest {_num(ratios[lowest], 2)}x at {lowest})"
    )
    return Target(PER_CORE_TARGET, figure, met, gap, _failed_requests(key, ("engine", "alone"), list(ratios)))


def llm_targets(key: Mapping[str, float]) -> list[Target]:
    """The LLM serving targets that this run's figures can judge."""
    judged = [per_core_target(key), *(target.judge(key) for target in LLM_TARGETS)]
    return [t for t in judged if t is not None]


def owned_targets(key: Mapping[str, float]) -> set[str]:
    """Every target a section with these figures speaks for, judged this time or not: its rows in the
    published targets table are the section's to replace or remove."""
    if OVERLOAD_GOODPUT in key:
        return set(OVERLOAD_TARGETS)
    if BATCH_SAVING in key:
        return {BATCH_TARGET}
    if STRUCTURED_KEY in key:
        return {STRUCTURED_TARGET, STRUCTURED_TOOLS_TARGET}
    if not any(k.startswith("llm_") for k in key):
        return set()
    return {PER_CORE_TARGET, *(t.what for t in LLM_TARGETS), *RETIRED_LLM_TARGETS}


OVERLOAD_GOODPUT = "overload_goodput_share"  # bench.overload: goodput at twice capacity, a share of it
OVERLOAD_TARGETS = (
    "overload: goodput at twice the capacity >= 90 % of capacity",
    "overload: no request unanswered",
)


def overload_targets(key: Mapping[str, float]) -> list[Target]:
    share = key.get(OVERLOAD_GOODPUT)
    if share is None:
        return []
    lost = key["overload_unanswered"]
    goodput, none_lost = OVERLOAD_TARGETS
    # Capacity is a step of the sweep: the gateway may serve up to the next step, so a share somewhat
    # above 1 is the sweep's coarseness; far above, the offer was not really past capacity.
    doubt = "the sweep's capacity step was far below what the gateway then served" if share > 1.3 else ""
    gap = f"{0.9 - share:.0%} short" if share < 0.9 else ""
    return [
        Target(goodput, f"{share:.0%} of capacity", share >= 0.9, gap, doubt),
        Target(none_lost, f"{lost:,.0f} unanswered", lost == 0),
    ]


BATCH_SAVING = "batch_api_saving"  # bench.batch_api: 1 - whole bill / naive, through the Batch API
BATCH_SAVING_TARGET = 0.95
BATCH_TARGET = "Batch API: whole bill >= 95 % below one invocation per request (gpu-sim)"
BATCH_PART = "batch_api_per_1000_"  # followed by a part of the bill: its dollars per 1,000


def batch_api_targets(key: Mapping[str, float]) -> list[Target]:
    """The Batch API's whole bill per 1,000 against one invocation per request; a miss names the part of
    the bill that dominates."""
    saving = key.get(BATCH_SAVING)
    if saving is None:
        return []
    met = saving >= BATCH_SAVING_TARGET
    figure = (
        f"{saving:.1%} below (${key['batch_api_per_1000']:.5f} vs ${key['batch_api_naive_per_1000']:.5f} "
        "per 1,000)"
    )
    parts = {k.removeprefix(BATCH_PART): v for k, v in key.items() if k.startswith(BATCH_PART)}
    gap = ""
    if not met and parts:
        largest = max(parts, key=lambda part: parts[part])
        share = parts[largest] / sum(parts.values())
        gap = f"(needs {BATCH_SAVING_TARGET:.0%}; largest part: {largest}, {share:.0%} of the bill)"
    return [Target(BATCH_TARGET, figure, met, gap)]


STRUCTURED_KEY = "structured_tps_ratio"
STRUCTURED_TOOLS_KEY = "structured_tools_tps_ratio"
STRUCTURED_RATIO = 0.8
STRUCTURED_TARGET = "structured output: tokens/s under a JSON schema >= 80 % of none's"
STRUCTURED_TOOLS_TARGET = "function tools, tool_choice auto: tokens/s >= 80 % of no tools'"


def structured_targets(key: Mapping[str, float]) -> list[Target]:
    """The engine's tokens/s with every row under a JSON schema, and with tools offered (`auto`), against
    none (bench.structured)."""
    found = []
    for what, name in ((STRUCTURED_TARGET, STRUCTURED_KEY), (STRUCTURED_TOOLS_TARGET, STRUCTURED_TOOLS_KEY)):
        ratio = key.get(name)
        if ratio is not None:
            met = ratio >= STRUCTURED_RATIO
            found.append(Target(what, f"{ratio:.0%}", met, "" if met else f"(needs {STRUCTURED_RATIO:.0%})"))
    return found


EMBEDDINGS_CLIENTS = 64
EMBEDDINGS_RATIO = 0.8


def embeddings_targets(key: Mapping[str, float]) -> list[Target]:
    """The platform's embeddings/s at 64 clients against the model alone at its best batch size; failed
    requests leave the verdict inconclusive (the figure counts only answered ones)."""
    mine = key.get(f"embeddings_platform_per_s_c{EMBEDDINGS_CLIENTS}")
    if mine is None:
        return []
    alone, batch = key["embeddings_alone_best_per_s"], key["embeddings_alone_best_batch"]
    share = mine / alone if alone else math.nan
    met = share >= EMBEDDINGS_RATIO
    figure = f"{_num(mine)} vs {_num(alone)} /s ({_num(share, 2)}x alone, at batch {batch:.0f})"
    errors = key.get(f"embeddings_errors_c{EMBEDDINGS_CLIENTS}", 0.0)
    doubt = f"{errors:,.0f} requests failed" if errors > 0 else ""
    what = (
        f"embeddings, {EMBEDDINGS_CLIENTS} clients: >= {EMBEDDINGS_RATIO:g}x the model alone "
        "at its best batch size"
    )
    gap = "" if met else f"(needs at least {EMBEDDINGS_RATIO:g}x)"
    return [Target(what, figure, met, gap, doubt)]


def llm_table(rows: Sequence[LlmRow], paths: Sequence[str]) -> str:
    lines = [
        "| path | clients | output tok/s | req/s | tokens per answer | TTFT P50 ms | TTFT P99 ms "
        "| ITL P50 ms | ITL P99 ms | answered | errors |",
        "| --- " * 11 + "|",
    ]
    ordered = sorted(rows, key=lambda r: (paths.index(r.path), r.concurrency))
    for r in ordered:
        ttft = f"{_num(r.ttft_p50_ms)} | {_num(r.ttft_p99_ms)}"
        itl = f"{_num(r.itl_p50_ms, 1)} | {_num(r.itl_p99_ms, 1)}"
        rates = f"{_num(r.output_tps, 1)} | {_num(r.request_rate, 2)} | {_num(r.tokens_per_answer)}"
        lines.append(
            f"| {r.path} | {r.concurrency} | {rates} | {ttft} | {itl} | {r.requests:,} | {r.errors:,} |"
        )
    notes = [f"- {r.path}, {r.concurrency} clients: {note}" for r in ordered for note in r.notes]
    return "\n".join(lines + (["", *notes] if notes else []))


def per_core_table(rows: Sequence[LlmRow], engine: str, alone: str) -> str:
    """The platform's engine path against the engine alone at each concurrency: output tokens per
    core-second of the process serving the model, and TTFT, with their ratios."""
    at = {(r.path, r.concurrency): r for r in rows}
    lines = [
        "| clients | platform tok/s | worker cores | tok/s per worker core | alone tok/s | alone cores "
        "| tok/s per core alone | per-core ratio | TTFT P50 ms platform / alone | TTFT ratio |",
        "| --- " * 10 + "|",
    ]
    for c in sorted({r.concurrency for r in rows}):
        mine, theirs = at.get((engine, c)), at.get((alone, c))
        if mine is None or theirs is None:
            continue
        per_core = mine.tps_per_core / theirs.tps_per_core if theirs.tps_per_core else math.nan
        ttft = mine.ttft_p50_ms / theirs.ttft_p50_ms if theirs.ttft_p50_ms else math.nan
        sides = " | ".join(
            f"{_num(r.output_tps, 1)} | {_num(r.serving_cores, 2)} | {_num(r.tps_per_core, 1)}"
            for r in (mine, theirs)
        )
        ttfts = f"{_num(mine.ttft_p50_ms)} / {_num(theirs.ttft_p50_ms)}"
        lines.append(f"| {c} | {sides} | {_num(per_core, 2)}x | {ttfts} | {_num(ttft, 2)}x |")
    return "\n".join(lines)


CORE_COLUMNS = (("worker", "worker (Triton)"), ("gateway", "gateway (front door)"), ("manager", "manager"),
                ("redis", "Redis"), ("aiperf", "aiperf"), ("engine", "engine process"))  # fmt: skip


def cores_table(rows: Sequence[LlmRow], paths: Sequence[str]) -> str:
    measured = [r for r in sorted(rows, key=lambda r: (paths.index(r.path), r.concurrency)) if r.cores]
    columns = [(k, title) for k, title in CORE_COLUMNS if any(k in r.cores for r in measured)]
    lines = [
        "| path | clients | " + " | ".join(title for _, title in columns) + " | all |",
        "| --- " * (len(columns) + 3) + "|",
    ]
    for r in measured:
        cells = " | ".join(_num(r.cores[k], 2) if k in r.cores else "" for k, _ in columns)
        lines.append(f"| {r.path} | {r.concurrency} | {cells} | {_num(sum(r.cores.values()), 2)} |")
    return "\n".join(lines)


@dataclass(frozen=True)
class LlmSetup:
    """What the LLM section says about how its figures were taken."""

    checkpoint: str  # its name
    shape: str  # what it is
    requests: Mapping[int, int]
    load: str  # the prompts and how long the answers may run
    aiperf_version: str
    paths: tuple[str, ...]  # the engine path, the static path where it ran, the engine alone last
    max_s: float  # a platform run stops sending after this long
    folder: str = "triton_models/tiny-gpt2"  # the model folder the engine path serves
    served_as: str = "gpt2-bench"  # its staged name


def llm_markdown(rows: Sequence[LlmRow], png: Path, key: Mapping[str, float], setup: LlmSetup) -> str:
    engine, alone = setup.paths[0], setup.paths[-1]
    counts = ", ".join(f"{n} at {c}" for c, n in setup.requests.items())
    aiperf = f"[aiperf](https://pypi.org/project/aiperf/) {setup.aiperf_version}"
    static = next((p for p in setup.paths[1:-1]), None)
    static_item = (
        f"""- **{static}**: the same stack serving the static request-batching model tiny-gpt2 was before
  the engine (`bench/models/gpt2-static`): the manager batches requests (up to 32) and each batch
  generates to its longest answer; the answer comes as one chunk, so its TTFT is its whole latency
  and it has no inter-token latency. Only `--quick` runs it: a batch of real answers runs to its
  longest, past the 28 s a synchronous call may wait on 2 cores.
"""
        if static
        else ""
    )
    return f"""{aiperf} against `/v1/chat/completions` with streaming, counting tokens with the
checkpoint's own tokenizer folder and the server's usage figures (the end-of-turn token counts, as in
vLLM); {setup.load}. Greedy decoding on every path, so each question gets the same answer on both.
The checkpoint, `{setup.checkpoint}`: {setup.shape}; every path serves the same one, on this
machine's CPU. Each concurrency is a closed loop of that many clients for a fixed number of requests
({counts}; a platform run stops sending after {setup.max_s:.0f} s); with so few requests at low
concurrency, P99 is close to the slowest request.

- **{engine}**: the gateway, the front door, Redis, the manager and one worker (`SYNAPSE_MIN_WORKERS=1`,
  `SYNAPSE_MAX_WORKERS=1`) whose Triton runs the continuous-batching engine (`{setup.folder}`
  staged as `{setup.served_as}`, its settings as they are, `max_model_len` the checkpoint's context);
  tokens stream as they come.
{static_item}- **{alone}**: transformers' continuous batching on the same checkpoint with the engine model's
  settings, no Triton and no platform, replaying the very requests aiperf sent the engine path at
  the same concurrency, in the order it sent them, timed by the bench itself (`bench/llm_engine.py`):
  the ceiling.

TTFT counts from sending a request to its first token; a request's inter-token latency is
(latency - TTFT) / (output tokens - 1), as aiperf defines it, and the percentiles are over requests.

{llm_table(rows, setup.paths)}

The platform against the engine alone: output tokens per core-second of the process that serves the
model (the platform's worker: its agent, Triton and the model stub; the engine alone's process), the
figure that does not depend on what else shares the machine, and time to first token.

{per_core_table(rows, engine, alone)}

{targets_table(llm_targets(key))}

![output tokens/s and TTFT against concurrency]({png.name})

Where the cores went under load (mean cores over each run's load, from /proc; a worker counts with its
Triton server and model stub). The platform paths share the machine with aiperf; the engine alone
has it to itself.

{cores_table(rows, setup.paths)}
"""


def _split(page: str) -> list[str]:
    """The page cut before each `## ` heading: the preamble, then one piece per section."""
    return re.split(r"(?m)^(?=## )", page)


def merge_section(
    page: str,
    section: str,
    judged: Sequence[Target],
    *,
    owned: Collection[str] = (),
    former_titles: Collection[str] = (),
) -> str:
    """`page` (BENCHMARKS.md) with `section` (from its `## ` heading on) in place of the section of the
    same title (or of one of its former titles), or before the capacity plan when it has none, and the
    rows of `judged` in its targets table in place of rows for the same targets, the rows of the other
    targets it `owned` (not judged this time) removed: one scenario re-run without re-running the others."""
    title = section.splitlines()[0]
    pieces = _split(page)
    new = section.rstrip("\n") + "\n\n\n"
    titles = [p.splitlines()[0] if p.startswith("## ") else "" for p in pieces]
    earlier = [i for i, t in enumerate(titles) if t == title or t[3:] in former_titles]
    if earlier:
        pieces[earlier[0]] = new
        for index in reversed(earlier[1:]):
            del pieces[index], titles[index]
    else:
        plan = next((i for i, t in enumerate(titles) if t.startswith("## Capacity plan")), len(pieces))
        pieces.insert(plan, new)
        titles.insert(plan, title)
    if "## Targets" in titles:
        index = titles.index("## Targets")
        pieces[index] = _with_rows(pieces[index], judged, owned)
    return "".join(pieces)


def _with_rows(piece: str, judged: Sequence[Target], owned: Collection[str] = ()) -> str:
    """A targets section whose table has `judged`'s rows, replacing rows of the same targets and
    dropping those of the `owned` targets not judged."""
    fresh = targets_table(judged).splitlines()[2:]
    names = {t.what for t in judged} | set(owned)
    lines = piece.splitlines()
    rows = [i for i, line in enumerate(lines) if line.startswith("| ")]
    if not rows:
        return piece
    kept = [line for line in lines[rows[0] : rows[-1] + 1] if line.split(" | ")[0][2:] not in names]
    return "\n".join([*lines[: rows[0]], *kept, *fresh, *lines[rows[-1] + 1 :]]) + "\n"
