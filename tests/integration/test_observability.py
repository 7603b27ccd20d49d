"""Observability end to end: a short load on the real stack, scraped by a real Prometheus (the project's
config and rules, 1 s intervals), and every dashboard query answered from it."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import aiohttp
import openai
import pytest
from prometheus_client import CollectorRegistry, Gauge, push_to_gateway
from prometheus_client.parser import text_string_to_metric_families

from contract.keys import WORKERS_KEY, worker_key
from contract.metric_families import WORKER_PUSH_JOB
from contract.scrape_config import local_prometheus_config
from local_stack.monitoring import (
    local_targets,
    prometheus_argv,
    redis_exporter_argv,
    write_prometheus_config,
)
from tests.integration.conftest import Stack, start_worker
from tests.processes import free_port, start, stop, wait_until
from tests.promql import (
    BUILT_IN,
    DASHBOARDS,
    RULE_FILES,
    dashboard_queries,
    exposed_names_from_text,
    has_finite_value,
    metric_names,
    recorded_names,
    rule_queries,
    substitute,
)

pytestmark = pytest.mark.integration

LOAD_JOBS = 300
DATA_TIMEOUT_S = 90


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def get_json(url: str) -> Any:
    return json.loads(get(url))


def ready(url: str) -> bool:
    try:
        return get(url).strip() != ""
    except OSError:
        return False


@pytest.fixture(scope="module")
def redis_exporter(stack: Stack) -> Iterator[int]:
    """Debian's Redis exporter on the test stack's Redis, as `synapse up` runs it; yields its port."""
    port = free_port()
    log = stack.logs / "redis-exporter.log"
    proc = start(redis_exporter_argv(port, stack.redis_url), {}, log)
    wait_until(lambda: ready(f"http://127.0.0.1:{port}/metrics"), 30, "the redis exporter", proc, log)
    yield port
    stop(proc)


@pytest.fixture(scope="module")
def prometheus(stack: Stack, redis_exporter: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real Prometheus with the project's config, pointed at the test stack, scraping every second."""
    home = tmp_path_factory.mktemp("prometheus")
    pushgateway_port = urllib.parse.urlparse(stack.pushgateway_url).port or 0
    targets = local_targets(
        manager_port=stack.manager_metrics_port,
        pushgateway_port=pushgateway_port,
        redis_exporter_port=redis_exporter,
    )
    config = write_prometheus_config(local_prometheus_config(targets, scrape_interval="1s"), home)
    port = free_port()
    log = stack.logs / "prometheus.log"
    proc = start(prometheus_argv(config, home / "data", port), {}, log)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: ready(f"{url}/-/ready"), 60, "prometheus", proc, log)
    yield url
    stop(proc)


SHED_RETRY_FOR_S = 60


async def _submit(session: aiohttp.ClientSession, api: str, body: dict[str, Any]) -> tuple[int, Any]:
    """One submission as a well-behaved client makes it: a request the gateway shed (503 or 429 with
    Retry-After, nothing queued: a loaded machine's loop runs late) is sent again after the wait it
    names, for up to SHED_RETRY_FOR_S; then the test fails, naming the refusal."""
    deadline = time.monotonic() + SHED_RETRY_FOR_S
    while True:
        async with session.post(f"{api}/async-infer", json=body) as response:
            reply = await response.json()
            retry_after = response.headers.get("Retry-After")
            if response.status not in (429, 503) or retry_after is None:
                return response.status, reply
        if time.monotonic() > deadline:
            raise TimeoutError(f"still refused after {SHED_RETRY_FOR_S} s: {response.status} {reply}")
        await asyncio.sleep(float(retry_after))


async def _final(session: aiohttp.ClientSession, api: str, job_id: str) -> dict[str, Any]:
    async with session.get(f"{api}/results/{job_id}", params={"wait": "20"}) as response:
        return dict(await response.json())


GENERATIVE_JOBS = 8
EMBEDDING_JOBS = 5


async def _load(stack: Stack, prometheus: str) -> dict[str, int]:
    """A batch of one per model (T1 for the naive cost), generations and embeddings once Prometheus has
    seen their series (a series born with its only sample shows no rate), then a burst with a failing
    prompt and rejections."""
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=120),
        headers={"x-api-key": stack.api_key},
    ) as session:
        # One model at a time: a job of a model whose only worker is full with another model's
        # batches waits for its own dispatcher's next event (see the closing note of issue #6).
        alone = [
            {"model": "gpu-sim", "prompt": "alone"},
            {"model": "tiny-gpt2", "prompt": "The"},
            {"model": "minilm", "input": "alone"},
        ]
        bodies = [{"model": "gpu-sim", "prompt": f"load {i}"} for i in range(LOAD_JOBS)]
        bodies += [{"model": "gpu-sim", "prompt": "!fail on purpose"}]
        bodies += [{"model": "no-such-model", "prompt": "x"}] * 3
        generations = [
            {"model": "tiny-gpt2", "prompt": f"The {i}", "parameters": {"max_tokens": 16}}
            for i in range(GENERATIVE_JOBS)
        ]
        embeddings = [
            {"model": "minilm", "input": [f"text {i}", f"other {i}"]} for i in range(EMBEDDING_JOBS)
        ]
        replies, finals = [], []
        for phase in [[body] for body in alone] + [generations, embeddings, bodies]:
            if phase is generations:
                for series in ("synapse_output_tokens_total", "synapse_embeddings_total"):
                    await asyncio.to_thread(
                        wait_until, lambda series=series: bool(_instant(prometheus, series)), 30,
                        f"prometheus to scrape {series}, born with the first job of its model",
                    )  # fmt: skip
            sent = await asyncio.gather(*(_submit(session, stack.api, body) for body in phase))
            accepted = [reply["jobId"] for status, reply in sent if status == 202]
            finals += await asyncio.gather(*(_final(session, stack.api, job_id) for job_id in accepted))
            replies += sent
    statuses = [final["status"] for final in finals]
    return {
        "accepted": sum(1 for status, _ in replies if status == 202),
        "rejected": sum(1 for status, _ in replies if status == 400),
        "completed": statuses.count("COMPLETED"),
        "failed": statuses.count("FAILED"),
    }


def _batch_api_batch(stack: Stack) -> None:
    """A small Batch API batch run to `completed`: the Batch API row's create-to-completed quantiles."""
    client = openai.OpenAI(base_url=f"{stack.api}/v1", api_key=stack.api_key, max_retries=0, timeout=60)
    url = "/v1/chat/completions"
    lines = [
        json.dumps({"custom_id": f"c{i}", "method": "POST", "url": url,
                    "body": {"model": "gpu-sim", "messages": [{"role": "user", "content": f"batch {i}"}]}})
        for i in range(5)
    ]  # fmt: skip
    data = ("\n".join(lines) + "\n").encode()
    file_id = client.files.create(file=("requests.jsonl", data), purpose="batch").id
    batch = client.batches.create(input_file_id=file_id, endpoint=url, completion_window="24h")
    wait_until(lambda: client.batches.retrieve(batch.id).status == "completed", 60, "the batch to complete")


@pytest.fixture(scope="module")
def load(stack: Stack, prometheus: str) -> dict[str, int]:
    # Prometheus must see the counters before the load too, or rate() has nothing to compare with.
    wait_until(lambda: _targets_up(prometheus), 60, "prometheus to scrape the manager and the pushgateway")
    _batch_api_batch(stack)
    summary = asyncio.run(_load(stack, prometheus))
    others = GENERATIVE_JOBS + 1 + EMBEDDING_JOBS  # and the embedding job alone
    assert summary == {
        "accepted": LOAD_JOBS + 3 + others, "rejected": 3, "completed": LOAD_JOBS + 2 + others, "failed": 1,
    }  # fmt: skip
    return summary


def _targets_up(prometheus: str) -> bool:
    active = get_json(f"{prometheus}/api/v1/targets")["data"]["activeTargets"]
    return {t["labels"]["job"] for t in active if t["health"] == "up"} == {
        "synapse-manager",
        "pushgateway",
        "redis",
    }


def _instant(prometheus: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    reply = get_json(url)
    assert reply["status"] == "success", reply
    return list(reply["data"]["result"])


def test_every_dashboard_query_returns_data_from_prometheus(prometheus: str, load: dict[str, int]):
    queries = [q for path in DASHBOARDS for q in dashboard_queries(path)]
    missing = {q.where: substitute(q.expr) for q in queries}
    deadline = time.monotonic() + DATA_TIMEOUT_S
    while missing and time.monotonic() < deadline:
        for where, expr in list(missing.items()):
            if has_finite_value(_instant(prometheus, expr)):
                del missing[where]
        time.sleep(1)
    assert not missing, f"queries without data: {json.dumps(missing, indent=2)}"
    assert len(queries) > 30


def test_every_rule_evaluates_cleanly_on_real_data(prometheus: str, load: dict[str, int]):
    def rules() -> list[dict[str, Any]]:
        groups = get_json(f"{prometheus}/api/v1/rules")["data"]["groups"]
        return [rule | {"interval": group["interval"]} for group in groups for rule in group["rules"]]

    # Groups on the 1 s test interval evaluate at once; the long-window group runs once a minute, so
    # its expressions are also run directly, which fails the same way an evaluation would.
    wait_until(
        lambda: all(r["health"] != "unknown" for r in rules() if r["interval"] <= 1), 30, "rule evaluation"
    )
    loaded = rules()
    assert sorted(r["name"] for r in loaded) == sorted(q.where.split(" / ")[1] for q in rule_queries())
    assert [(r["name"], r.get("lastError")) for r in loaded if r["health"] == "err"] == []
    for query in rule_queries():
        _instant(prometheus, query.expr)


def test_the_names_in_dashboards_and_rules_exist_in_the_live_expositions(
    stack: Stack, redis_exporter: int, load: dict[str, int]
):
    manager = get(f"http://127.0.0.1:{stack.manager_metrics_port}/metrics")
    exposed = (
        exposed_names_from_text(manager)
        | exposed_names_from_text(get(f"{stack.pushgateway_url}/metrics"))
        | exposed_names_from_text(get(f"http://127.0.0.1:{redis_exporter}/metrics"))
    )
    assert "synapse_worker_cold_start_seconds" in exposed, "worker-a should have pushed by now"
    recorded = recorded_names()
    queries = [q for path in DASHBOARDS for q in dashboard_queries(path)] + rule_queries()
    names = {name for q in queries for name in metric_names(substitute(q.expr))}
    assert {n for n in names if ":" not in n} - exposed <= BUILT_IN - {"push_time_seconds"}
    assert {n for n in names if ":" in n} <= recorded


def _manager_samples(stack: Stack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = get(f"http://127.0.0.1:{stack.manager_metrics_port}/metrics")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_manager_counts_the_front_door_and_prices_the_load(stack: Stack, load: dict[str, int]):
    rejected = ("synapse_jobs_rejected_total", (("reason", "unknown_model"),))
    wait_until(lambda: _manager_samples(stack).get(rejected, 0) >= 3, 10, "the sampler to see rejections")
    samples = _manager_samples(stack)
    assert samples[("synapse_jobs_submitted_total", (("model", "gpu-sim"),))] >= LOAD_JOBS + 2
    assert samples[("synapse_jobs_completed_total", (("model", "gpu-sim"),))] >= LOAD_JOBS + 1
    assert samples[("synapse_jobs_failed_total", (("model", "gpu-sim"), ("reason", "model_error")))] >= 1
    assert samples[("synapse_worker_busy_seconds_total", (("worker", "worker-a"),))] > 0
    assert samples[("synapse_workers_running", ())] >= 1
    # gpu-sim sleeps 20 ms + 0.5 ms per prompt: a measured batch of one cannot be shorter.
    t1 = samples[("synapse_batch_of_one_duration_seconds", (("model", "gpu-sim"),))]
    assert 0.0205 <= t1 < 5
    assert samples[("synapse_naive_gpu_cost_dollars_total", (("model", "gpu-sim"),))] > 0
    assert samples[("synapse_gpu_cost_dollars_total", ())] > 0


def _groups(stack: Stack) -> dict[str, dict[str, Any]]:
    data = get_json(f"{stack.pushgateway_url}/api/v1/metrics")["data"]
    return {group["labels"].get("worker", ""): group for group in data}


def test_a_worker_pushes_its_metrics_and_deletes_its_group_when_it_deregisters(stack: Stack, redis_url: str):
    # Registered in a plain Redis database no manager looks at: only the worker can delete its group.
    plain_database = redis_url.rsplit("/", 1)[0] + "/1"
    env = {**stack.env, "SYNAPSE_REDIS_URL": plain_database, "SYNAPSE_REDIS_CLUSTER": "false"}
    worker = start_worker(env, "worker-push", stack.logs, models="gpu-sim")
    try:
        wait_until(lambda: "worker-push" in _groups(stack), 30, "worker-push's first push")
        group = _groups(stack)["worker-push"]
        assert group["labels"]["job"] == WORKER_PUSH_JOB
        loads = group["synapse_worker_model_load_seconds"]["metrics"]
        assert [m["labels"]["model"] for m in loads] == ["gpu-sim"]
        assert float(group["synapse_worker_cold_start_seconds"]["metrics"][0]["value"]) >= float(
            loads[0]["value"]
        )
    finally:
        assert stop(worker) == 0
    assert "worker-push" not in _groups(stack)


def test_the_manager_deletes_the_group_of_a_worker_that_vanished(stack: Stack):
    client = stack.redis()
    ghost = "worker-ghost"
    fields = {"id": ghost, "grpc_url": "127.0.0.1:1", "http_url": "http://127.0.0.1:1",
              "metrics_url": "http://127.0.0.1:1/metrics", "models": "", "state": "STARTING",
              "started_ms": "0"}  # fmt: skip
    client.hset(worker_key(ghost), mapping=fields)
    client.sadd(WORKERS_KEY, ghost)
    registry = CollectorRegistry()
    Gauge("synapse_worker_cold_start_seconds", "as a crashed worker left it", registry=registry).set(12.0)
    push_to_gateway(
        stack.pushgateway_url, job=WORKER_PUSH_JOB, registry=registry, grouping_key={"worker": ghost}
    )
    busy = ("synapse_worker_busy_seconds_total", (("worker", ghost),))
    wait_until(lambda: busy in _manager_samples(stack), 15, "the manager to see the ghost worker")
    assert ghost in _groups(stack)

    client.delete(worker_key(ghost))  # what a crash looks like once its registration expires
    client.srem(WORKERS_KEY, ghost)
    wait_until(lambda: ghost not in _groups(stack), 15, "the manager to delete the ghost's group")
    wait_until(lambda: busy not in _manager_samples(stack), 15, "the manager to forget the ghost")


def test_prometheus_loads_the_repository_s_own_rule_file(prometheus: str, load: dict[str, int]):
    files = {g["file"] for g in get_json(f"{prometheus}/api/v1/rules")["data"]["groups"]}
    assert files == {str(path.resolve()) for path in RULE_FILES}
