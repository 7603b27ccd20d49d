"""LLM serving, measured with a peer tool: aiperf against `/v1/chat/completions` with streaming, on a
GPT-2-small-sized checkpoint with random weights (compute, not overhead, dominates), for three paths
on the same checkpoint in the same run:

- the platform with its continuous-batching engine (`triton_models/tiny-gpt2`, staged as gpt2-bench);
- the platform with the static request-batching model it had before (`bench/models/gpt2-static`),
  which the manager batches by request and which answers in one chunk;
- the engine alone, without the platform (bench.llm_engine): the ceiling.

Each concurrency is a closed loop of that many clients for a fixed number of requests, prompts of
about 32 tokens and output lengths drawn around a mean of 64 tokens with a wide spread.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import redis

from bench import llm_aiperf, llm_plot
from bench.llm_cpu import CpuSampler
from bench.llm_engine import Cell, EnginePlan, engine_settings
from bench.llm_figures import LlmRow, load_window, row_from_aiperf
from bench.report import LlmSetup, llm_markdown, machine
from bench.scenarios import Options, Section
from bench.stack import API_KEY, REPO, BenchStack
from contract.catalog_build import served_model
from contract.keys import job_key
from worker_image.checkpoint import build_gpt2_small_random, build_tiny_gpt2

ENGINE, STATIC, ALONE = "platform, engine", "platform, static batching", "engine alone"
CACHE = REPO / "bench" / "results" / "raw" / "cache"  # built once, kept between runs (ignored by git)
# Requests per concurrency (1, 4, 16, 32, 64 clients): a few batch cycles of the static path at each,
# the whole `synapse bench llm` within about 12 minutes on a 2-core machine.
REQUESTS = {1: 8, 4: 16, 16: 48, 32: 96, 64: 128}
QUICK_REQUESTS = {1: 3, 4: 8}
WARMUP = 2  # requests before the first concurrency of each path (lazy initialisation, caches)
ENGINE_TIMEOUT_S = 900.0
# The longest a /v1 call may wait for a whole answer (the platform's limit is under API Gateway's 29 s):
# a static batch of 32 long answers takes about 20 s on 2 cores.
SYNC_TIMEOUT_S = "28"
TITLE = "LLM serving: continuous batching, static batching, the engine alone (aiperf)"


@dataclass(frozen=True)
class Checkpoint:
    name: str
    build: Callable[[Path], Path]
    context: int  # positions: the engine's max_model_len
    describe: str

    def path(self) -> Path:
        return self.build(CACHE / self.name)


GPT2_SMALL = Checkpoint(
    "gpt2-small-random", build_gpt2_small_random, 1024,
    "GPT-2 small's shape (124 M parameters, 12 layers, 1,024 positions, 50,257 tokens)",
)  # fmt: skip
TINY = Checkpoint("tiny-gpt2", build_tiny_gpt2, 256, "the tests' 2-layer GPT-2 (`--quick`)")


@dataclass(frozen=True)
class PlatformPath:
    label: str
    model: str  # the name it is served under
    source: Path  # the model folder staged for it

    def stage(self, repository: Path, checkpoint: Path, context: int) -> Path:
        """A copy of the model folder under this name, its checkpoint parameter the benchmark's."""
        dest = repository / self.model
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(self.source, dest, ignore=shutil.ignore_patterns("__pycache__"))
        config = dest / "config.pbtxt"
        text = re.sub(r'^name: "[^"]*"', f'name: "{self.model}"', config.read_text(), flags=re.MULTILINE)
        text = set_parameter(text, "checkpoint", str(checkpoint))
        if "max_model_len" in text:
            text = set_parameter(text, "max_model_len", str(context))
        config.write_text(text)
        return dest


def set_parameter(config: str, key: str, value: str) -> str:
    text, found = re.subn(rf'(key: "{key}" value: \{{ string_value: )"[^"]*"', rf'\g<1>"{value}"', config)
    if found != 1:
        raise ValueError(f"expected one {key} parameter in the config, found {found}")
    return text


PATHS = (
    PlatformPath(ENGINE, "gpt2-bench", REPO / "triton_models" / "tiny-gpt2"),
    PlatformPath(STATIC, "gpt2-static", REPO / "bench" / "models" / "gpt2-static"),
)


def slug(label: str, concurrency: int) -> str:
    return f"{re.sub(r'[^a-z]+', '-', label).strip('-')}-c{concurrency}"


@dataclass
class Plan:
    checkpoint: Path
    context: int
    requests: dict[int, int]
    raw: Path
    progress: bool = True

    def artifacts(self, label: str, concurrency: int) -> Path:
        return self.raw / slug(label, concurrency)


def measure_platform(path: PlatformPath, plan: Plan) -> list[LlmRow]:
    """One stack serving the path's model on one worker; aiperf at each concurrency. Each row carries
    the cores each process used under load: the platform shares the machine with aiperf."""
    rows = []
    with BenchStack(plan.raw / f"stack-{path.model}", models=path.model) as stack:
        stack.start_redis()
        repository = plan.raw / f"models-{path.model}"
        path.stage(repository, plan.checkpoint, plan.context)
        stack.start_worker(f"worker-{path.model}", repository)
        stack.start_manager(f"manager-{path.model}", SYNAPSE_MIN_WORKERS="1", SYNAPSE_MAX_WORKERS="1")
        stack.start_gateway(SYNAPSE_SYNC_TIMEOUT_S=SYNC_TIMEOUT_S)
        with CpuSampler(stack.process_roots()) as cpu:
            for index, (concurrency, count) in enumerate(plan.requests.items()):
                spec = llm_aiperf.AiperfRun(
                    url=stack.api, model=path.model, api_key=API_KEY, tokenizer=plan.checkpoint,
                    concurrency=concurrency, requests=count, warmup=WARMUP if index == 0 else 0,
                )  # fmt: skip
                _say(plan, f"{path.label}, concurrency {concurrency}: {count} requests")
                artifacts = plan.artifacts(path.label, concurrency)
                before = job_outcomes(stack.redis())
                llm_aiperf.run(spec, artifacts)
                row = row_from_aiperf(path.label, concurrency, artifacts)
                row = annotated(row, spec, job_outcomes(stack.redis()) - before)
                window = load_window(artifacts)
                rows.append(replace(row, cores=cpu.cores(*window)) if window else row)
    return rows


def annotated(row: LlmRow, spec: llm_aiperf.AiperfRun, outcomes: Counter[str]) -> LlmRow:
    """The row with what the run's figures alone do not say: a run cut short, jobs that did not end well."""
    notes = list(row.notes)
    sent = row.requests + row.errors
    if sent < spec.requests:
        notes.append(f"stopped sending at the {spec.max_s:.0f} s cap: {sent} of {spec.requests} sent")
    del outcomes["COMPLETED"]
    if outcomes:
        told = ", ".join(f"{n} {outcome}" for outcome, n in outcomes.most_common())
        notes.append(f"jobs not completed when the run ended: {told}")
    return replace(row, notes=tuple(notes))


def job_outcomes(client: redis.Redis) -> Counter[str]:
    """Every job in the store by status, and error code where it failed: the platform's own account."""
    keys = list(client.scan_iter(match=job_key("*"), count=1000))
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hmget(key, ["status", "error_code"])
    found: Counter[str] = Counter()
    for status, code in pipe.execute():
        found[f"{status} ({code})" if code else str(status)] += 1
    return found


def measure_alone(plan: Plan, model_folder: Path, inputs_of: str) -> list[LlmRow]:
    """The engine alone in a process of its own, with the staged engine model's settings, replaying
    what aiperf sent the `inputs_of` path."""
    cells = tuple(
        Cell(c, n, WARMUP if i == 0 else 0, str(plan.artifacts(inputs_of, c)))
        for i, (c, n) in enumerate(plan.requests.items())
    )
    settings = engine_settings(model_folder / "config.pbtxt")
    engine = EnginePlan(str(plan.checkpoint), settings, served_model(model_folder).chat_template, cells)
    plan_file = engine.write(plan.raw / "engine-alone-plan.json")
    out = plan.raw / "engine-alone-rows.json"
    _say(plan, f"{ALONE}: concurrency {', '.join(str(c) for c in plan.requests)}")
    with (plan.raw / "engine-alone.log").open("w") as log:
        subprocess.run(
            [sys.executable, "-m", "bench.llm_engine", str(plan_file), str(out)], cwd=REPO, stdout=log,
            stderr=subprocess.STDOUT, timeout=ENGINE_TIMEOUT_S, check=True,
        )  # fmt: skip
    return [LlmRow.from_json(r) for r in json.loads(out.read_text())]


def _say(plan: Plan, text: str) -> None:
    if plan.progress:
        print(f"bench: llm: {text}", flush=True)


def llm(opts: Options) -> Section:
    """The three paths at each concurrency, their table, the targets at concurrency 32 and 1, a plot."""
    started, at, where = time.monotonic(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), machine()
    checkpoint = TINY if opts.quick else GPT2_SMALL
    requests = QUICK_REQUESTS if opts.quick else REQUESTS
    raw = opts.out / "raw" / "llm"
    plan = Plan(checkpoint.path(), checkpoint.context, requests, raw, progress=opts.progress)
    plan.raw.mkdir(parents=True, exist_ok=True)
    llm_aiperf.ensure_installed()
    rows = [row for path in PATHS for row in measure_platform(path, plan)]
    rows += measure_alone(plan, plan.raw / f"models-{PATHS[0].model}" / PATHS[0].model, ENGINE)
    (plan.raw / "rows.json").write_text(json.dumps([r.to_json() for r in rows], indent=2))
    title = f"Streaming chat completions on {checkpoint.name}, measured with aiperf"
    png = llm_plot.by_concurrency(opts.out / "llm-serving.png", rows, (ENGINE, STATIC, ALONE), title)
    setup = LlmSetup(
        checkpoint=checkpoint.name, shape=checkpoint.describe, requests=requests,
        load=llm_aiperf.LoadShape().describe(), aiperf_version=llm_aiperf.VERSION,
        paths=(ENGINE, STATIC, ALONE), max_s=llm_aiperf.AiperfRun.max_s,
    )  # fmt: skip
    key = llm_key(rows)
    taken = f"Taken {at} in {(time.monotonic() - started) / 60:.1f} min on {where}.\n\n"
    return Section(TITLE, taken + llm_markdown(rows, png, key, setup), key=key)


def llm_key(rows: list[LlmRow]) -> dict[str, float]:
    """The figures the targets are judged on (report.targets)."""
    at = {(r.path, r.concurrency): r for r in rows}
    key: dict[str, float] = {}
    for name, label in (("engine", ENGINE), ("static", STATIC), ("alone", ALONE)):
        for c in (1, 32):
            if (label, c) in at:
                key[f"llm_{name}_ttft_p50_ms_c{c}"] = at[label, c].ttft_p50_ms
                key[f"llm_{name}_tps_c{c}"] = at[label, c].output_tps
                key[f"llm_{name}_errors_c{c}"] = at[label, c].errors
    return key
