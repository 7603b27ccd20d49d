"""Small helpers the API tests share: counting what reached the queue, starting an extra gateway, a
tenant's HTTP client, waiting for a job to end and reading the engines' own counters."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from contract.catalog import Catalog, ModelKind, ServedModel
from contract.catalog_build import build_catalog
from contract.keys import WORKERS_KEY, stream_key, worker_key
from contract.settings import Settings
from tests.models import engine_series
from tests.processes import free_port, port_open, start, synapse, wait_until

if TYPE_CHECKING:
    from tests.integration.conftest import Stack

SERVED = Settings().models


def entries_added(client: redis.Redis, models: Iterable[str] = SERVED) -> int:
    """Stream entries ever added for these models, both priorities: a request that enqueued nothing
    leaves it unchanged."""
    total = 0
    for model in models:
        for priority in ("interactive", "batch"):
            key = stream_key(model, priority)
            if client.exists(key):
                total += int(client.xinfo_stream(key)["entries-added"])
    return total


@contextmanager
def process_held(pid: int) -> Iterator[None]:
    """A process stopped (SIGSTOP) for the block: the manager, say, so that jobs wait unread."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def start_gateway(
    env: dict[str, str], api_key: str, logs: Path, name: str, **settings: str
) -> tuple[subprocess.Popen[bytes], str]:
    """Another gateway on the same Redis, with its own settings (`SYNAPSE_<NAME>` values)."""
    port = free_port()
    overrides = {f"SYNAPSE_{k.upper()}": v for k, v in settings.items()}
    gateway_env = {**env, **overrides, "SYNAPSE_API_PORT": str(port), "SYNAPSE_API_KEY": api_key}
    log = logs / f"{name}.log"
    proc = start(synapse("gateway"), gateway_env, log)
    wait_until(lambda: port_open(port), 60, name, proc, log)
    return proc, f"http://127.0.0.1:{port}"


class Reply:
    def __init__(self, status_code: int, text: str) -> None:
        self.status_code, self.text = status_code, text

    def json(self) -> Any:
        return json.loads(self.text)


class Api:
    """A tenant's client: its key on every request; an error status is a reply, not an exception."""

    def __init__(self, base: str, key: str) -> None:
        self._base, self._key = base, key

    def _send(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Reply:
        url = self._base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        data = None if body is None else json.dumps(body).encode()
        headers = {"x-api-key": self._key, "Content-Type": "application/json"}
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return Reply(response.status, response.read().decode())
        except urllib.error.HTTPError as error:
            return Reply(error.code, error.read().decode())

    def get(self, path: str, params: dict[str, Any] | None = None) -> Reply:
        return self._send("GET", path, params=params)

    def post(self, path: str, json: Any = None) -> Reply:
        return self._send("POST", path, body=json)


def api(stack: Stack, key: str | None = None) -> Api:
    return Api(stack.api, key or stack.api_key)


def submit(client: Api, prompt: str, model: str = "gpu-sim", **extra: Any) -> str:
    """A job through `POST /async-infer`; its id once accepted."""
    reply = client.post("/async-infer", json={"model": model, "prompt": prompt, **extra})
    assert reply.status_code == 202, reply.text
    return str(reply.json()["jobId"])


def final(client: Api, job_id: str) -> dict[str, Any]:
    view: dict[str, Any] = {}
    for _ in range(10):
        view = client.get(f"/results/{job_id}", params={"wait": 20}).json()
        if view["status"] in ("COMPLETED", "FAILED", "CANCELLED"):
            return view
    raise AssertionError(f"job {job_id} is still {view.get('status')}")


def worker_metrics(stack: Stack) -> dict[str, str]:
    """Each registered worker's Triton /metrics page, by worker id (one going away meanwhile is skipped)."""
    redis_client = stack.redis()
    pages: dict[str, str] = {}
    for worker in redis_client.smembers(WORKERS_KEY):  # type: ignore[union-attr]
        url = redis_client.hget(worker_key(str(worker)), "metrics_url")
        try:
            with urllib.request.urlopen(str(url), timeout=10) as response:
                pages[str(worker)] = response.read().decode()
        except (OSError, ValueError):  # another test's worker, going away (or not yet serving)
            continue
    return pages


Counters = dict[str, dict[str, float]]  # by worker id: the engine's series by name


def engines(stack: Stack, model: str) -> Counters:
    """Each registered worker's engine counters for the model."""
    return {worker: engine_series(page, model) for worker, page in worker_metrics(stack).items()}


def grown(before: Counters, after: Counters, name: str) -> float:
    """How much a counter grew on the workers in both readings (one that came or went meanwhile would
    only add noise)."""
    return sum(after[worker][name] - before[worker][name] for worker in after.keys() & before.keys())


def with_unserved_model(stack: Stack, model: str) -> dict[str, str]:
    """Settings for a gateway that also accepts `model`, which no worker or manager serves (its jobs stay
    QUEUED): gpu-sim's catalog entry and a one-shot entry for it, as a deploy would hand them over."""
    served = build_catalog(Path(stack.env["SYNAPSE_MODEL_REPOSITORY"]), ["gpu-sim"]).models.values()
    catalog = Catalog.of([*served, ServedModel(model, ModelKind.ONE_SHOT)])
    return {"models": f"gpu-sim,{model}", "model_catalog": catalog.to_json()}


def longest_generation(stack: Stack, model: str) -> int:
    """Tokens a generation can ask for from a short prompt: the model's window (as the stack's catalog has
    it) less some room."""
    served = build_catalog(Path(stack.env["SYNAPSE_MODEL_REPOSITORY"]), [model])
    context = served[model].max_model_len
    assert context is not None, f"{model} states no max_model_len"
    return context - 16


# Greedy generations of one prompt in the engine at once when one of them is cancelled: each is as long
# as the others, and sharing the engine's steps keeps the cancelled one running long enough for its
# cancel to land on a loaded machine (tiny-gpt2 alone makes 240 tokens in about 0.4 s).
SHARING = 16


def cancel_stopped_its_generation(stack: Stack, model: str, before: Counters, *, longest: int) -> bool:
    """After one of `SHARING` greedy generations of `longest` tokens each was cancelled (and the others
    ended): True when the engine counted exactly that cancel and stopped the sequence short; False when
    the cancel came after the last token (a lost race, worth another attempt); fails on anything else."""
    running = "synapse_engine_sequences"
    wait_until(
        lambda: sum(c[running] for c in engines(stack, model).values()) == 0, 30, "the engine to run nothing"
    )
    after = engines(stack, model)
    generated = grown(before, after, "synapse_engine_generated_tokens_total")
    cancels = grown(before, after, "synapse_engine_cancelled_total")
    if cancels == 0:
        assert generated == SHARING * longest, f"no cancel counted, and {generated:.0f} tokens generated"
        return False
    assert cancels == 1
    assert generated < SHARING * longest, "the engine counted the cancel but generated every token"
    return True
