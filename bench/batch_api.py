"""The Batch API through the official `openai` SDK, unchanged, on the local stack: its throughput, and its
whole bill per 1,000 inferences beside the two per-request paths.

1. A chat batch (`/v1/chat/completions` on gpu-sim, a few of its lines invalid) and an embeddings batch
   (`/v1/embeddings` on minilm), each uploaded, created, polled every `POLL_S` as a client would, and
   its output and error files downloaded. Every custom_id must be in exactly one file and the batch's
   request_counts must match the files: the benchmark raises otherwise and reports nothing.
2. The same number of gpu-sim jobs by each path, one after another on the same stack: submit and
   long-poll (`POST /async-infer`, `GET /results/{id}?wait=20`), a synchronous `POST /v1/completions`
   each, and one Batch API batch of `/v1/completions` lines. The manager's ledger, read before and after
   each, gives every part of the bill and the naive baseline (bench/ledger.py).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import openai

from bench.embeddings import DIMENSIONS, MODEL_FOLDER, SENTENCES
from bench.embeddings import MODEL as EMBEDDING_MODEL
from bench.ledger import TIME_PARTS, Bill, read_ledger
from bench.loadgen import HttpTarget, Sample, Target, prompt
from bench.report import BATCH_SAVING, BATCH_SAVING_TARGET, _num, batch_api_targets, targets_table
from bench.scenarios import MAX_BATCH, STANDARD, Options, Section
from bench.stack import API_KEY, BenchStack, gpu_sim_repository
from frontdoor.usage import FLUSH_INTERVAL_S
from manager.cost import PARTS
from manager.sampler import SAMPLE_INTERVAL_S

TITLE = "Batch API: throughput, and the whole bill per 1,000 beside submit + poll and /v1"
MODEL = "gpu-sim"
Endpoint = Literal["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]
CHAT: Endpoint = "/v1/chat/completions"
COMPLETIONS: Endpoint = "/v1/completions"
EMBEDDINGS: Endpoint = "/v1/embeddings"
FINAL = frozenset({"completed", "failed", "expired", "cancelled"})
CHAT_LINES, QUICK_CHAT_LINES = 10_000, 400  # in all, the invalid ones among them
EMBEDDING_LINES, QUICK_EMBEDDING_LINES = 2_000, 200
COST_JOBS, QUICK_COST_JOBS = 5_000, 400  # per path
CLIENTS = 128  # closed-loop clients of the per-request paths
POLL_S = 1.0  # a batch's status, asked as often as a client would
BATCH_TIMEOUT_S = 900.0
REQUEST_TIMEOUT_S = 60.0
WARMUP_JOBS = 20  # one at a time: batches of one, so the ledger knows T1 before the first path
T1_TIMEOUT_S = 10.0
MAX_TOKENS = 16


def chat_body(i: int) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt(i)}], "max_tokens": MAX_TOKENS}


# Lines the /v1 route refuses, each spread through the chat batch: they must land in its error file.
INVALID: dict[str, dict[str, Any]] = {
    "invalid-bad-body": {"model": MODEL, "messages": "not a list"},
    "invalid-unknown-model": {**chat_body(0), "model": "llama-9000"},
    "invalid-no-messages": {"model": MODEL, "max_tokens": MAX_TOKENS},
    "invalid-negative-max-tokens": {**chat_body(0), "max_tokens": -1},
}


def request_line(custom_id: str, url: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def chat_lines(count: int) -> list[dict[str, Any]]:
    """`count` lines in all: valid chat requests, with the INVALID ones spread evenly among them."""
    valid = count - len(INVALID)
    lines = [request_line(f"chat-{i}", CHAT, chat_body(i)) for i in range(valid)]
    for n, (custom_id, body) in enumerate(INVALID.items()):
        lines.insert((n + 1) * valid // (len(INVALID) + 1) + n, request_line(custom_id, CHAT, body))
    return lines


def embedding_lines(count: int) -> list[dict[str, Any]]:
    """One sentence per line, the embeddings benchmark's sentences in turn."""
    return [
        request_line(
            f"embed-{i}", EMBEDDINGS, {"model": EMBEDDING_MODEL, "input": SENTENCES[i % len(SENTENCES)]}
        )
        for i in range(count)
    ]


def completion_body(i: int) -> dict[str, Any]:
    return {"model": MODEL, "prompt": prompt(i), "max_tokens": MAX_TOKENS}


def completion_lines(count: int) -> list[dict[str, Any]]:
    return [request_line(f"job-{i}", COMPLETIONS, completion_body(i)) for i in range(count)]


class BatchCheckError(RuntimeError):
    """A batch whose files or counts are wrong: the benchmark refuses to report on it."""


@dataclass(frozen=True)
class Counts:
    total: int
    completed: int
    failed: int


def check_results(
    ids: Sequence[str],
    invalid: Collection[str],
    counts: Counts | None,
    output: Sequence[dict[str, Any]],
    errors: Sequence[dict[str, Any]],
) -> None:
    """Every custom_id in exactly one file, the counts those of the files, every valid line answered 200
    in the output file and every invalid one refused with a 4xx in the error file; else BatchCheckError."""
    problems: list[str] = []
    seen = Counter(row["custom_id"] for row in [*output, *errors])
    for what, found in (
        ("in both files or twice in one", sorted(i for i, n in seen.items() if n > 1)),
        ("in neither file", sorted(set(ids) - set(seen))),
        ("not in the input", sorted(set(seen) - set(ids))),
        ("valid but in the error file", sorted({r["custom_id"] for r in errors} - set(invalid))),
        ("invalid but not in the error file", sorted(set(invalid) - {r["custom_id"] for r in errors})),
        ("in the output file without a 200", [r["custom_id"] for r in output if _status(r) != 200]),
        ("invalid without a 4xx", [r["custom_id"] for r in errors if not 400 <= (_status(r) or 0) < 500]),
    ):
        if found:
            problems.append(f"{len(found)} custom_ids {what} ({', '.join(found[:5])})")
    files = Counts(len(ids), len(output), len(errors))
    if counts != files:
        problems.append(f"request_counts {counts} but the files hold {files}")
    if problems:
        raise BatchCheckError("; ".join(problems))


def _status(row: dict[str, Any]) -> int | None:
    response = row.get("response")
    return int(response["status_code"]) if isinstance(response, dict) else None


def check_vectors(output: Sequence[dict[str, Any]], dimensions: int = DIMENSIONS) -> None:
    """Each embeddings answer holds one vector of the model's dimensions."""
    short = [
        r["custom_id"]
        for r in output
        if [len(d["embedding"]) for d in r["response"]["body"]["data"]] != [dimensions]
    ]
    if short:
        raise BatchCheckError(f"{len(short)} answers without one {dimensions}-float vector ({short[:5]})")


@dataclass(frozen=True)
class BatchRun:
    """One batch as its client saw it."""

    name: str
    endpoint: str
    model: str
    lines: int
    completed: int
    failed: int
    create_to_final_s: float  # from create's answer to the poll that saw the batch final
    wall_s: float  # from the upload's start to the last download's end
    calls: int  # the client's requests: upload, create, polls, downloads

    @property
    def lines_per_s(self) -> float:
        return self.lines / self.create_to_final_s


def _jsonl(lines: Sequence[dict[str, Any]]) -> bytes:
    return ("\n".join(json.dumps(line) for line in lines) + "\n").encode()


def _download(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


def run_batch(
    client: openai.OpenAI, name: str, endpoint: Endpoint, lines: Sequence[dict[str, Any]], *,
    invalid: Collection[str] = (), vectors: bool = False,
) -> BatchRun:  # fmt: skip
    """Upload, create, poll until final, download both files, check them."""
    started = time.monotonic()
    upload = client.files.create(file=(f"{name}.jsonl", _jsonl(lines)), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint=endpoint, completion_window="24h")
    created, calls = time.monotonic(), 2
    while batch.status not in FINAL:
        if time.monotonic() - created > BATCH_TIMEOUT_S:
            raise BatchCheckError(f"batch {batch.id} still {batch.status} after {BATCH_TIMEOUT_S:.0f} s")
        time.sleep(POLL_S)
        batch = client.batches.retrieve(batch.id)
        calls += 1
    final = time.monotonic()
    if batch.status != "completed":
        raise BatchCheckError(f"batch {batch.id} ended {batch.status}: {batch.errors}")
    output = _download(client, batch.output_file_id)
    errors = _download(client, batch.error_file_id)
    calls += (batch.output_file_id is not None) + (batch.error_file_id is not None)
    wall = time.monotonic() - started
    counts = batch.request_counts
    check_results(
        [line["custom_id"] for line in lines], invalid,
        None if counts is None else Counts(counts.total, counts.completed, counts.failed), output, errors,
    )  # fmt: skip
    if vectors:
        check_vectors(output)
    model = str(lines[0]["body"]["model"])
    return BatchRun(name, endpoint, model, len(lines), len(output), len(errors), final - created, wall, calls)


class CompletionsTarget:
    """One synchronous `POST /v1/completions` per job, held until its answer; a 200 with a choice is a
    completed job. A loadgen Target."""

    name = "v1"

    def __init__(self, api: str, api_key: str) -> None:
        self._url = f"{api}/v1/completions"
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),  # the clients are the limit
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
        )

    async def call(self, index: int, sample: Sample) -> None:
        async with self._session.post(self._url, json=completion_body(index)) as response:
            payload = await response.json()
            if response.status != 200:
                sample.error = str(response.status)
                return
        sample.ok = bool(payload.get("choices"))
        sample.error = "" if sample.ok else "no choices"

    async def aclose(self) -> None:
        await self._session.close()


async def run_count(target: Target, jobs: int, clients: int) -> list[Sample]:
    """Jobs 0 to `jobs` - 1, each once, by `clients` closed-loop clients."""
    samples = [Sample(intended=0.0) for _ in range(jobs)]
    indices = iter(range(jobs))  # shared: each client takes the next index not yet taken
    start = time.monotonic()

    async def client() -> None:
        for index in indices:
            sample = samples[index]
            sample.sent = time.monotonic() - start
            try:
                await target.call(index, sample)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                sample.error = sample.error or type(exc).__name__
            sample.done = time.monotonic() - start

    try:
        await asyncio.gather(*(client() for _ in range(clients)))
    finally:
        await target.aclose()
    return samples


def run_jobs(make: Callable[[], Target], jobs: int, clients: int) -> int:
    """Jobs completed; the target is made inside the event loop that drives it."""

    async def body() -> list[Sample]:
        return await run_count(make(), jobs, clients)

    return sum(1 for s in asyncio.run(body()) if s.ok)


@dataclass(frozen=True)
class PathCost:
    path: str
    jobs: int
    wall_s: float  # from the reading before to the client's last result
    bill: Bill


def settle(api: str) -> None:
    """Until the run's counts are in the ledger: past the front door's write interval, one request
    (counted too) makes it write what it holds; two manager samples later the ledger has it."""
    time.sleep(FLUSH_INTERVAL_S + 0.2)
    with urllib.request.urlopen(f"{api}/healthz", timeout=10) as response:
        response.read()
    time.sleep(2 * SAMPLE_INTERVAL_S + 0.5)


def cost_path(stack: BenchStack, path: str, jobs: int, run: Callable[[], int]) -> PathCost:
    """One path's run (`run` returns the jobs its client saw completed) between ledger readings."""
    print(f"bench: batch: {jobs:,} jobs by {path} ...", flush=True)
    before = read_ledger(stack.manager_metrics)
    started = time.monotonic()
    completed = run()
    wall = time.monotonic() - started
    end = read_ledger(stack.manager_metrics)
    settle(stack.api)
    bill = Bill.between(before, end, read_ledger(stack.manager_metrics), MODEL)
    if bill.completed != completed:
        raise BatchCheckError(
            f"{path}: the client saw {completed:,} jobs completed, the ledger {bill.completed:,.0f}"
        )
    print(f"bench: batch: {path}: {completed / wall:,.0f} jobs/s, ${bill.total_per_thousand:.5f} per 1,000, "
          f"{bill.saving:.1%} below naive", flush=True)  # fmt: skip
    return PathCost(path, jobs, wall, bill)


ASYNC, V1, BATCH = "submit + long-poll", "/v1/completions", "Batch API"
SLUGS = {ASYNC: "async", V1: "v1", BATCH: "batch"}


def start_stack(stack: BenchStack, opts: Options) -> None:
    """One worker serving gpu-sim (the standard profile) and minilm, one manager pricing with the bench's
    prices, the gateway; then jobs one at a time, so the ledger has measured T1: jobs completed before it
    wait unpriced, and would be priced naively inside a later path's readings."""
    repository = gpu_sim_repository(stack.root / "models", base_ms=STANDARD.base_ms,
                                    per_item_ms=STANDARD.per_item_ms, max_batch=MAX_BATCH)  # fmt: skip
    shutil.copytree(MODEL_FOLDER, repository / EMBEDDING_MODEL, ignore=shutil.ignore_patterns("__pycache__"))
    stack.start_redis()
    stack.start_worker("worker-batch", repository)
    stack.start_manager(
        "manager-batch", SYNAPSE_MIN_WORKERS="1", SYNAPSE_MAX_WORKERS="1",
        SYNAPSE_GPU_PRICE_PER_HOUR=str(opts.gpu_price),
        SYNAPSE_MANAGER_PRICE_PER_HOUR=str(opts.manager_price),
    )  # fmt: skip
    stack.start_gateway()
    if run_jobs(lambda: CompletionsTarget(stack.api, API_KEY), WARMUP_JOBS, 1) != WARMUP_JOBS:
        raise RuntimeError(f"the warm-up's jobs did not all complete: see {stack.root}")
    deadline = time.monotonic() + T1_TIMEOUT_S
    while MODEL not in read_ledger(stack.manager_metrics).t1_s:  # its next sample publishes it
        if time.monotonic() > deadline:
            raise RuntimeError(f"the ledger has no T1 for {MODEL} after the warm-up: see {stack.root}")
        time.sleep(0.2)


def batch_api(opts: Options) -> Section:
    chat_n, embed_n, jobs = (
        (QUICK_CHAT_LINES, QUICK_EMBEDDING_LINES, QUICK_COST_JOBS) if opts.quick
        else (CHAT_LINES, EMBEDDING_LINES, COST_JOBS)
    )  # fmt: skip
    with BenchStack(opts.out / "raw" / "batch", models=f"{MODEL},{EMBEDDING_MODEL}") as stack:
        start_stack(stack, opts)
        client = openai.OpenAI(base_url=f"{stack.api}/v1", api_key=API_KEY, max_retries=0,
                               timeout=REQUEST_TIMEOUT_S)  # fmt: skip
        client.embeddings.create(model=EMBEDDING_MODEL, input=SENTENCES[0])  # minilm's first call is slow
        print(f"bench: batch: {chat_n:,}-line chat batch ...", flush=True)
        batches = [run_batch(client, "chat", CHAT, chat_lines(chat_n), invalid=set(INVALID))]
        print(f"bench: batch: {embed_n:,}-line embeddings batch ...", flush=True)
        batches.append(run_batch(client, "embeddings", EMBEDDINGS, embedding_lines(embed_n), vectors=True))
        runs: dict[str, Callable[[], int]] = {
            ASYNC: lambda: run_jobs(lambda: HttpTarget(stack.api, API_KEY), jobs, CLIENTS),
            V1: lambda: run_jobs(lambda: CompletionsTarget(stack.api, API_KEY), jobs, CLIENTS),
            BATCH: lambda: run_batch(client, "completions", COMPLETIONS, completion_lines(jobs)).completed,
        }
        costs = [cost_path(stack, path, jobs, run) for path, run in runs.items()]
        t1_s = read_ledger(stack.manager_metrics).t1_s.get(MODEL, float("nan"))
    key = batch_key(batches, costs)
    return Section(TITLE, markdown(batches, costs, t1_s, key), key=key)


def batch_key(batches: Sequence[BatchRun], costs: Sequence[PathCost]) -> dict[str, float]:
    """The figures the target is judged on (report.batch_api_targets), and each batch's rate."""
    key = {f"batch_api_{run.name}_lines_per_s": run.lines_per_s for run in batches}
    for cost in costs:
        key[f"batch_api_{SLUGS[cost.path]}_saving"] = cost.bill.saving
    batch = next(c.bill for c in costs if c.path == BATCH)
    key[BATCH_SAVING] = batch.saving
    key["batch_api_per_1000"] = batch.total_per_thousand
    key["batch_api_naive_per_1000"] = batch.naive_per_thousand
    key.update({f"batch_api_per_1000_{part}": batch.per_thousand(batch.cost[part]) for part in PARTS})
    return key


def _money(value: float) -> str:
    return f"${value:.5f}"


# S3 Standard bills $0.005 per 1,000 PUTs and $0.0004 per 1,000 GETs (https://aws.amazon.com/s3/pricing/);
# SSE-KMS adds $0.03 per 10,000 KMS requests (https://aws.amazon.com/kms/pricing/): ten requests a batch
# stay under $0.0001, which the section says rather than prices.
def markdown(
    batches: Sequence[BatchRun], costs: Sequence[PathCost], t1_s: float, key: dict[str, float]
) -> str:
    runs = ["| batch | endpoint | model | lines | completed | failed | create to completed s | lines/s "
            "| wall s (upload to downloads) | client requests |", "| --- " * 10 + "|"]  # fmt: skip
    runs += [f"| {r.name} | `{r.endpoint}` | {r.model} | {r.lines:,} | {r.completed:,} | {r.failed:,} "
             f"| {_num(r.create_to_final_s, 1)} | {_num(r.lines_per_s)} | {_num(r.wall_s, 1)} | {r.calls} |"
             for r in batches]  # fmt: skip
    head = "| path | jobs | completed | wall s | jobs/s | front-door requests per job | " + " | ".join(PARTS)
    bills = [head + " | whole bill | naive | saving |", "| --- " * (len(PARTS) + 9) + "|"]
    for c in costs:
        b = c.bill
        parts = " | ".join(_money(b.per_thousand(b.cost[part])) for part in PARTS)
        bills.append(
            f"| {c.path} | {c.jobs:,} | {b.completed:,.0f} | {_num(c.wall_s, 1)} "
            f"| {_num(b.completed / c.wall_s)} "
            f"| {_num(b.requests_total / b.completed, 3)} | {parts} | **{_money(b.total_per_thousand)}** "
            f"| {_money(b.naive_per_thousand)} | {b.saving:.1%} |"
        )
    jobs = costs[0].jobs if costs else 0
    return f"""`synapse bench batch` (part of `make bench`): the gateway, the front door, Redis, one manager
and one worker serving gpu-sim (T(b) = {STANDARD.base_ms:g} ms for b <= {MAX_BATCH}) and minilm on this
machine's CPU. The official `openai` SDK ({openai.__version__}), unchanged, uploads each input file
(`client.files.create`), creates the batch, asks for it every {POLL_S:g} s (`client.batches.retrieve`)
until it is final, and downloads its output and error files. The chat batch holds {len(INVALID)} lines
the `/v1` route refuses (a bad body, an unknown model, no messages, a negative `max_tokens`). Before
reporting, the benchmark checks that every custom_id is in exactly one of the two files, that each
valid line is a 200 in the output file and each invalid one a 4xx in the error file, and that
`request_counts` are those of the files; it raises otherwise. Lines/s count from create's answer to
the poll that saw the batch completed. Before the first batch the stack is warmed: {WARMUP_JOBS} gpu-sim
jobs one at a time (so the ledger has measured T1) and one embeddings request (minilm's first call).

{chr(10).join(runs)}

The whole bill per 1,000 gpu-sim inferences by three paths, one after another on the same stack, each
{jobs:,} jobs: submit and long-poll (`POST /async-infer`, then `GET /results/{{id}}?wait=20` until
final) and a synchronous `POST /v1/completions` each, both from {CLIENTS} closed-loop clients; and one
Batch API batch of {jobs:,} `/v1/completions` lines (upload, create, polls, downloads). Each path's bill
is what it added to the manager's ledger (`manager/cost.py`, read from its `/metrics`:
`synapse_cost_dollars_total{{part}}`, `synapse_naive_cost_dollars_total{{part}}`,
`synapse_jobs_completed_total`, `synapse_frontdoor_requests_total{{route}}`), priced at the bench's
GPU and manager prices and AWS's list prices for the rest; every part of the bill is counted, not GPU
time alone. The naive baseline is one invocation per request: per job T1 of GPU (gpu-sim's measured
batch of one: {_num(t1_s * 1000)} ms), one API Gateway request and one front-door Lambda held for T1
with its authorizer call, and no manager, cache or idle cost.

{chr(10).join(bills)}

The time-based parts ({", ".join(sorted(TIME_PARTS))}, and the cache's idle minimum) accrue over each
path's wall time, from the reading before it to its client's last result, whether the worker is busy
or not: the faster a path moves its jobs, the less of them each job carries. The per-request parts
(API Gateway, Lambda, the cache's ECPUs) and the naive baseline are read once the front door's counts
have reached the ledger. The Batch API's lines are submitted by the manager's batch runner, not through
the front door: a batch costs its client's few requests (route `batch`) whatever its size. Not in the
ledger: the file store's requests to S3 in AWS, about ten a batch (the upload, the runner's read and copy
of it, the two output files, the downloads), under $0.0001 a batch at S3's list prices.

Target: the Batch API's whole bill at least {BATCH_SAVING_TARGET:.0%} below one invocation per request
(a miss names the part of the bill that dominates):

{targets_table(batch_api_targets(key))}
"""
