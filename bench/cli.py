"""`synapse bench`: runs the benchmark scenarios and writes the report.

`synapse bench all` (what `make bench` runs) runs every scenario, writes
bench/results/<timestamp>/report.md with its plots, and copies the report to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from bench.batch_api import batch_api
from bench.embeddings import embeddings
from bench.first_answer import first_answer
from bench.llm import llm
from bench.long_polls import long_polls
from bench.overload import overload
from bench.prefix_cache import prefix_cache
from bench.report import machine, merge_section, owned_targets, targets, targets_table
from bench.responses import responses
from bench.scaling import burst, manager_throughput
from bench.scenarios import STANDARD, Options, Section, load_sweep
from bench.stack import REPO
from bench.structured import structured
from bench.sustained import closed, sustained
from bench.tenant_burst import tenant_burst
from contract.settings import Settings
from planner.plan import MANAGER_PRICE_PER_HOUR, PlanRequest, plan
from planner.simulator import LatencyProfile

SCENARIOS: dict[str, tuple[Callable[[Options], Section], str]] = {
    "sustained": (sustained, "scenarios 1 and 2: 80 % load on Synapse (direct, HTTP) and both baselines"),
    "burst": (burst, "scenario 3: 1,000 requests at once with 0 workers running"),
    "first-answer": (
        first_answer,
        "1,000 gpu-sim jobs at zero workers loading every model: first answer vs one worker's ready time",
    ),
    "manager": (manager_throughput, "scenario 4: jobs per second one manager moves"),
    "sweep": (load_sweep, "three loads, measured and simulated: the planner's validation"),
    "closed": (closed, "closed loop: fixed numbers of HTTP clients"),
    "tenant-burst": (
        tenant_burst,
        "one tenant's 3,000 long-polls at once beside another tenant's polls and cancels: the other's P99",
    ),
    "longpolls": (long_polls, "submissions at 100/s beside 2,000 open long-polls: the gateway's starvation"),
    "overload": (
        overload,
        "the gateway's capacity, then twice that offered: goodput and unanswered requests",
    ),
    "llm": (llm, "streaming chat with aiperf on SmolLM2: the platform against the engine alone"),
    "structured": (structured, "SmolLM2's tokens/s under a JSON schema and with tools (auto) against none"),
    "embeddings": (embeddings, "minilm embeddings/s: the platform at 1, 16 and 64 clients, the model alone"),
    "responses": (
        responses,
        "non-streamed /v1/responses against /v1/chat/completions on SmolLM2: tokens/s, time to the answer",
    ),
    "prefix": (
        prefix_cache,
        "8 long system prompts on 2 SmolLM2 workers: prefix-aware against least-loaded routing; cached TTFT",
    ),
    "batch": (
        batch_api,
        "the Batch API through the openai SDK: lines/s, and the whole bill per 1,000 "
        "beside submit+poll and /v1",
    ),
}


def planner_section() -> Section:
    """The planner's answers for the original design's example and for the 250 ms SLO."""
    parts = []
    for slo_ms in (500, 250):
        request = PlanRequest(profile=STANDARD, max_batch=100, slo_p99_s=slo_ms / 1000, rate=20_000)
        parts.append(f"**20,000 jobs/s, P99 <= {slo_ms} ms:**\n\n{plan(request).table()}")
    linear = PlanRequest(profile=LatencyProfile(20, 0.5), max_batch=100, slo_p99_s=0.250, rate=20_000)
    parts.append(f"**Linear profile, 20,000 jobs/s, P99 <= 250 ms:**\n\n{plan(linear).table()}")
    intro = (
        "`synapse plan --rate 20000 --slo-ms 500 --slo-ms 250` (60 simulated seconds, per-batch overheads "
        "of 1 ms each, the manager's default window and batches in flight):"
    )
    body = intro + "\n\n" + "\n\n".join(parts)
    return Section("Capacity plan for 20,000 jobs/s (`synapse plan`)", body + "\n")


def write_report(out: Path, sections: list[Section], opts: Options, command: str, elapsed_s: float) -> Path:
    key: dict[str, float] = {}
    for section in sections:
        key.update(section.key)
    smoke = (
        "\n> **Smoke run** (`--quick`): short runs on a busy, shared machine. These figures show the "
        "benchmark works, not what Synapse does; run `make bench` on a quiet machine for those.\n"
        if opts.quick
        else ""
    )
    body = "\n\n".join(f"## {s.title}\n\n{s.markdown}" for s in sections)
    text = f"""# Synapse benchmarks
{smoke}
Taken {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())} with `{command}` in {elapsed_s / 60:.1f} min.
Machine: {machine()}. GPU price ${opts.gpu_price}/h (g5.xlarge on demand), manager ${opts.manager_price}/h
(Fargate, 1 vCPU, 2 GB). Workers run `gpu-sim`, which sleeps for T(b) without using the CPU, except in
the LLM section, which serves SmolLM2-135M-Instruct on the CPU, and the embeddings section, which serves
minilm (all-MiniLM-L6-v2) on the CPU.

## Targets

{targets_table(targets(key))}

Why a target is missed, and what would meet it: [bench/results/README.md](../README.md).

{body}
"""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.md"
    path.write_text(text)
    return path


def _linked(report: Path) -> str:
    """The report's text with its images linked from the repository root, where BENCHMARKS.md is."""
    folder = report.parent.relative_to(REPO)
    text = re.sub(r"\]\(([^)/]+\.png)\)", rf"]({folder.as_posix()}/\1)", report.read_text())
    return text.replace("](../README.md)", f"]({folder.parent.as_posix()}/README.md)")


def publish(report: Path) -> Path:
    """BENCHMARKS.md at the repository root: the report with its images linked from where they live."""
    target = REPO / "BENCHMARKS.md"
    target.write_text(_linked(report))
    return target


def publish_sections(report: Path, sections: Sequence[Section]) -> Path:
    """BENCHMARKS.md as it stands, with these sections of the report and their targets in place of
    their earlier versions: one scenario re-run without re-running the others."""
    text, target = _linked(report), REPO / "BENCHMARKS.md"
    for section in sections:
        start = text.index(f"## {section.title}\n")
        end = text.find("\n## ", start)
        piece = text[start:] if end < 0 else text[start : end + 1]
        merged = merge_section(
            target.read_text(), piece, targets(section.key),
            owned=owned_targets(section.key), former_titles=section.former_titles,
        )  # fmt: skip
        target.write_text(merged)
    return target


def parser() -> argparse.ArgumentParser:
    defaults = Settings.from_env()
    p = argparse.ArgumentParser(prog="synapse bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    lines = "\n".join(f"  {name:10} {text.replace('%', '%%')}" for name, (_, text) in SCENARIOS.items())
    p.add_argument("scenario", choices=["all", "plan", *SCENARIOS], help=f"all, plan, or one of:\n{lines}")
    p.add_argument("--quick", action="store_true", help="short runs: a smoke test of the benchmark itself")
    p.add_argument("--duration", type=float, default=30.0, help="seconds of load per run (default 30)")
    p.add_argument("--out", type=Path, help="report folder (default bench/results/<timestamp>)")
    p.add_argument("--gpu-price", type=float, default=defaults.gpu_price_per_hour, help="$ per GPU-hour")
    p.add_argument("--manager-price", type=float, default=MANAGER_PRICE_PER_HOUR, help="$ per manager-hour")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--publish", action="store_true",
                   help="also update BENCHMARKS.md: one scenario's section and targets replace their earlier "
                        "version (`all` always rewrites it)")  # fmt: skip
    return p


def main(argv: Sequence[str] | None = None) -> Path:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s bench %(levelname)s %(name)s: %(message)s")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out = (args.out or REPO / "bench" / "results" / stamp).resolve()
    opts = Options(out=out, quick=args.quick, duration_s=args.duration, gpu_price=args.gpu_price,
                   manager_price=args.manager_price, progress=not args.no_progress)  # fmt: skip
    names = list(SCENARIOS) if args.scenario == "all" else [] if args.scenario == "plan" else [args.scenario]
    started = time.monotonic()
    sections = []
    for name in names:
        print(f"bench: {name} ...", flush=True)
        t = time.monotonic()
        run, _ = SCENARIOS[name]
        sections.append(run(replace(opts)))
        print(f"bench: {name} done in {time.monotonic() - t:.0f} s", flush=True)
    if args.scenario in ("all", "plan"):
        sections.append(planner_section())
    command = "synapse bench " + " ".join(argv if argv is not None else [args.scenario])
    report = write_report(out, sections, opts, command, time.monotonic() - started)
    print(f"bench: report written to {report}")
    if args.scenario == "all" or (args.publish and not (REPO / "BENCHMARKS.md").exists()):
        print(f"bench: {publish(report)} updated")
    elif args.publish:
        print(f"bench: {publish_sections(report, sections)} updated")
    return report
