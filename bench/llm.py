"""LLM serving, measured with a peer tool: aiperf against `/v1/chat/completions` with streaming, on the
default chat model, SmolLM2-135M-Instruct (real weights, `triton_models/smollm2-135m-instruct`), asked
short everyday questions (bench.llm_prompts) whose answers end at the model's end of turn, for two
paths on the same checkpoint in the same run:

- the platform with its continuous-batching engine (the model folder staged as smollm2-bench);
- the engine alone, without the platform (bench.llm_engine), replaying what aiperf sent the
  platform: the ceiling.

Each concurrency is a closed loop of that many clients for a fixed number of requests. The figure the
platform is judged on is output tokens per core-second of its worker against the engine alone's
process (the platform's other processes and aiperf share the machine; on AWS they run elsewhere), and
time to first token at one client.

`--quick` runs the tests' tiny-gpt2 instead (random weights: its answers run to the cap), and adds
the static request-batching model tiny-gpt2 was before the engine (`bench/models/gpt2-static`), which
answers a batch in one chunk. The full run leaves it out: a static batch of SmolLM2's answers runs to
its longest, more than the 28 s a synchronous call may wait on 2 cores.
"""

from __future__ import annotations

import json
import math
import os
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
from bench.llm_engine import Cell, EnginePlan, engine_rules, engine_settings
from bench.llm_figures import LlmRow, load_window, row_from_aiperf
from bench.llm_prompts import write_dataset
from bench.report import LlmSetup, llm_markdown, machine
from bench.scenarios import Options, Section
from bench.stack import API_KEY, REPO, BenchStack
from contract.catalog_build import served_model
from contract.keys import job_key
from worker_image.checkpoint import build_tiny_gpt2, convert_smollm2

ENGINE, STATIC, ALONE = "platform, engine", "platform, static batching", "engine alone"
CACHE = REPO / "bench" / "results" / "raw" / "cache"  # built once, kept between runs (ignored by git)
MODELS = REPO / "triton_models"
# Requests per concurrency (1, 4, 16, 32, 64 clients): the answers average about 70 tokens, and
# the whole `synapse bench llm` takes about 15 minutes on a quiet 2-core machine.
REQUESTS = {1: 8, 4: 16, 16: 32, 32: 64, 64: 128}
QUICK_REQUESTS = {1: 3, 4: 8}
WARMUP = 2  # requests before the first concurrency of each path (lazy initialisation, caches)
ENGINE_TIMEOUT_S = 1800.0
# The longest a /v1 call may wait for a whole answer (the platform's limit is under API Gateway's 29 s):
# the static path's batches answer in one chunk.
SYNC_TIMEOUT_S = "28"
TITLE = "LLM serving: the platform against the engine alone (aiperf)"
FORMER_TITLES = ("LLM serving: continuous batching, static batching, the engine alone (aiperf)",)


@dataclass(frozen=True)
class Checkpoint:
    name: str
    build: Callable[[Path], Path]
    folder: Path  # the model folder the engine path stages (its settings, its chat template)
    served_as: str  # the staged folder's name
    context: int  # positions: the engine's max_model_len
    max_tokens: int  # the cap on each answer
    describe: str

    def path(self) -> Path:
        return self.build(CACHE / self.name)


SMOLLM2 = Checkpoint(
    "smollm2-135m-instruct", convert_smollm2, MODELS / "smollm2-135m-instruct", "smollm2-bench", 2048, 256,
    "SmolLM2-135M-Instruct (the default chat model: llama architecture, 134.5 M parameters, 30 layers, "
    "real weights, converted once by `worker_image.checkpoint.convert_smollm2`)",
)  # fmt: skip
TINY = Checkpoint(
    "tiny-gpt2", build_tiny_gpt2, MODELS / "tiny-gpt2", "gpt2-bench", 256, 32,
    "the tests' 2-layer GPT-2 with random weights (`--quick`)",
)  # fmt: skip


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


STATIC_PATH = PlatformPath(STATIC, "gpt2-static", REPO / "bench" / "models" / "gpt2-static")


def platform_paths(checkpoint: Checkpoint, *, static: bool) -> tuple[PlatformPath, ...]:
    """The engine path serving the checkpoint's model folder, and the static path where asked."""
    engine = PlatformPath(ENGINE, checkpoint.served_as, checkpoint.folder)
    return (engine, STATIC_PATH) if static else (engine,)


def slug(label: str, concurrency: int) -> str:
    return f"{re.sub(r'[^a-z]+', '-', label).strip('-')}-c{concurrency}"


@dataclass
class Plan:
    checkpoint: Path
    context: int
    requests: dict[int, int]
    raw: Path
    prompts: llm_aiperf.Prompts
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
                    concurrency=concurrency, requests=count, prompts=plan.prompts,
                    warmup=WARMUP if index == 0 else 0,
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
            env={**os.environ, **engine_rules().THREAD_ENVIRONMENT},
        )  # fmt: skip
    return [LlmRow.from_json(r) for r in json.loads(out.read_text())]


def _say(plan: Plan, text: str) -> None:
    if plan.progress:
        print(f"bench: llm: {text}", flush=True)


def llm(opts: Options) -> Section:
    """The paths at each concurrency, their table, the per-core and TTFT figures, the targets, a plot."""
    started, at, where = time.monotonic(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), machine()
    checkpoint = TINY if opts.quick else SMOLLM2
    requests = QUICK_REQUESTS if opts.quick else REQUESTS
    paths = platform_paths(checkpoint, static=opts.quick)
    raw = opts.out / "raw" / "llm"
    raw.mkdir(parents=True, exist_ok=True)
    prompts = llm_aiperf.Prompts(
        write_dataset(raw / "questions.jsonl", checkpoint.max_tokens), checkpoint.max_tokens
    )
    plan = Plan(checkpoint.path(), checkpoint.context, requests, raw, prompts, progress=opts.progress)
    llm_aiperf.ensure_installed()
    rows = [row for path in paths for row in measure_platform(path, plan)]
    rows += measure_alone(plan, plan.raw / f"models-{paths[0].model}" / paths[0].model, ENGINE)
    (plan.raw / "rows.json").write_text(json.dumps([r.to_json() for r in rows], indent=2))
    labels = (*(path.label for path in paths), ALONE)
    title = f"Streaming chat completions on {checkpoint.name}, measured with aiperf"
    png = llm_plot.by_concurrency(opts.out / "llm-serving.png", rows, labels, title)
    setup = LlmSetup(
        checkpoint=checkpoint.name, shape=checkpoint.describe, requests=requests, load=prompts.describe(),
        aiperf_version=llm_aiperf.VERSION, paths=labels, max_s=llm_aiperf.AiperfRun.max_s,
        folder=f"triton_models/{checkpoint.folder.name}", served_as=checkpoint.served_as,
    )  # fmt: skip
    key = llm_key(rows)
    taken = f"Taken {at} in {(time.monotonic() - started) / 60:.1f} min on {where}.\n\n"
    return Section(TITLE, taken + llm_markdown(rows, png, key, setup), key=key, former_titles=FORMER_TITLES)


def llm_key(rows: list[LlmRow]) -> dict[str, float]:
    """The figures the targets are judged on (report.targets), at every concurrency measured."""
    key: dict[str, float] = {}
    names = {ENGINE: "engine", STATIC: "static", ALONE: "alone"}
    for r in rows:
        name, c = names[r.path], r.concurrency
        key[f"llm_{name}_ttft_p50_ms_c{c}"] = r.ttft_p50_ms
        key[f"llm_{name}_tps_c{c}"] = r.output_tps
        key[f"llm_{name}_errors_c{c}"] = r.errors
        if not math.isnan(r.tps_per_core):
            key[f"llm_{name}_tps_per_core_c{c}"] = r.tps_per_core
    return key
