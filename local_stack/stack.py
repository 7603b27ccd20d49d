"""What `synapse up` runs: the whole platform on this machine, with real parts."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, urlparse, urlsplit

from redis.exceptions import RedisError

from contract.catalog import CHAT_MODEL
from contract.catalog_build import catalog_of
from contract.processes import parent_of, processes_with_env, signal_all, wait_gone
from contract.redis_client import async_client
from contract.scrape_config import local_prometheus_config
from contract.settings import Settings
from contract.tenants import KeyBook, keys_file
from contract.workers import WorkerRegistry, WorkerState, startup_models
from local_stack.monitoring import (
    local_targets,
    prometheus_argv,
    pushgateway_argv,
    redis_exporter_argv,
    write_prometheus_config,
)
from local_stack.supervisor import ProcessSpec

log = logging.getLogger("synapse.up")

REDIS_PASSWORD_FILE = "redis.password"
API_KEY_FILE = "api.key"
# As long as the provider gives its own workers (manager/providers/local.py STOP_TIMEOUT_S).
WORKER_STOP_TIMEOUT_S = 30.0


def write_private(path: Path, text: str) -> Path:
    """Writes a file only its owner may read (mode 0600 from its creation on), replacing any."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        out.write(text)
    tmp.replace(path)
    return path


def local_redis_password(state_dir: Path) -> str:
    """The local Redis's password: made at the first start, then read from <state_dir>/redis.password.

    Without one, any local user could read prompts and results, or inject jobs.
    """
    return _local_secret(state_dir / REDIS_PASSWORD_FILE, secrets.token_urlsafe(32))


def local_api_key(state_dir: Path) -> str:
    """The banner's API key, the default tenant's: made at the first start, then read from
    <state_dir>/api.key, so that it stays the same from one `synapse up` to the next. Once revoked
    (`synapse keys revoke`), the next start makes a new one."""
    path = state_dir / API_KEY_FILE
    key = _local_secret(path, "sk-local-" + secrets.token_urlsafe(18))
    if KeyBook.load(keys_file(state_dir)).is_revoked(key):
        path.unlink(missing_ok=True)
        key = _local_secret(path, "sk-local-" + secrets.token_urlsafe(18))
    return key


def _local_secret(path: Path, fresh_value: str) -> str:
    """The secret in `path` (mode 0600); fresh_value written there first if it holds none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not _read_password(path):
        fresh = write_private(path.with_name(f".{path.name}.new{os.getpid()}"), fresh_value)
        try:
            os.link(fresh, path)  # never overwrites: two first starts agree on one secret
        except FileExistsError:
            if not _read_password(path):  # an empty file would mean no secret at all
                fresh.replace(path)
        finally:
            fresh.unlink(missing_ok=True)
    path.chmod(0o600)
    return _read_password(path)


def _read_password(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def redis_argv(port: int, data_dir: Path, *, password: str | None = None) -> list[str]:
    """A project-owned Redis on loopback: AOF on, fsync every second (the durability promise).

    A password goes into a 0600 config file, never onto the command line (`ps` shows it to everyone).
    """
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    data_dir.mkdir(parents=True, exist_ok=True)
    config = [str(write_private(data_dir / "auth.conf", f"requirepass {password}\n"))] if password else []
    return [
        binary,
        *config,
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--dir", str(data_dir.resolve()),
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--save", "",
        "--daemonize", "no",
        "--maxclients", "10000",
        "--loglevel", "warning",
    ]  # fmt: skip


def synapse_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "local_stack.cli", *args]


def with_api_key(settings: Settings) -> Settings:
    """The banner's key: SYNAPSE_API_KEY if set, else the state directory's (`local_api_key`). The
    gateway makes it a key of the default tenant in the keys file."""
    if settings.api_key:
        return settings
    return settings.model_copy(update={"api_key": local_api_key(settings.state_dir)})


def for_local_stack(settings: Settings, environ: Mapping[str, str]) -> Settings:
    """`make up` scales local worker processes and keeps one warm unless told otherwise. The model catalog
    is built once, here (a model without a usable folder stops `make up` by name), and handed to the
    gateway and the manager as the AWS stacks hand it over: SYNAPSE_MODEL_CATALOG. Callbacks may reach
    loopback (a receiver on 127.0.0.1, as docs/callbacks.md runs one) unless SYNAPSE_CALLBACK_ALLOWED_NETWORKS
    says otherwise."""
    update: dict[str, object] = {"worker_provider": "local", "model_catalog": catalog_of(settings).to_json()}
    if "SYNAPSE_MIN_WORKERS" not in environ:
        update["min_workers"] = 1
    if "SYNAPSE_CALLBACK_ALLOWED_NETWORKS" not in environ:
        update["callback_allowed_networks"] = ("127.0.0.0/8",)
    if not settings.redis_auth_token:
        update["redis_auth_token"] = local_redis_password(settings.state_dir)
    return with_api_key(settings.model_copy(update=update))


def monitoring_specs(settings: Settings) -> list[ProcessSpec]:
    """The Pushgateway, the Redis exporter, and Prometheus scraping them and the manager (project rules)."""
    exporter_port = settings.redis_exporter_port
    targets = local_targets(
        manager_port=settings.metrics_port,
        pushgateway_port=settings.pushgateway_port,
        redis_exporter_port=exporter_port,
    )
    config = write_prometheus_config(local_prometheus_config(targets), settings.state_dir / "prometheus")
    data = settings.state_dir / "prometheus" / "data"
    specs = [
        ProcessSpec(
            "pushgateway", pushgateway_argv(settings.pushgateway_port), ready_port=settings.pushgateway_port
        )
    ]
    if exporter_port:
        # The exporter reads REDIS_PASSWORD itself: the token stays out of `ps`.
        password = {"REDIS_PASSWORD": settings.redis_auth_token} if settings.redis_auth_token else {}
        argv = redis_exporter_argv(exporter_port, settings.redis_url)
        specs.append(ProcessSpec("redis-exporter", argv, env=password, ready_port=exporter_port))
    prometheus = prometheus_argv(config, data, settings.prometheus_port)
    specs.append(ProcessSpec("prometheus", prometheus, ready_port=settings.prometheus_port))
    return specs


def local_stack(settings: Settings) -> list[ProcessSpec]:
    """Redis, then the manager (which starts the workers through the local provider), then the gateway."""
    redis_port = urlparse(settings.redis_url).port or 6379
    redis = redis_argv(redis_port, settings.state_dir / "redis", password=settings.redis_auth_token)
    env = settings.to_env()

    async def stop_workers() -> None:
        await stop_registered_workers(settings)

    manager = ProcessSpec(
        "manager", synapse_argv("manager"), env=env, ready_port=settings.metrics_port, stop_timeout_s=60,
        after_stop=stop_workers,
    )  # fmt: skip
    # The Pushgateway starts before the manager's workers and stops after them: they delete their groups.
    return [
        ProcessSpec("redis", redis, ready_port=redis_port),
        *monitoring_specs(settings),
        manager,
        ProcessSpec("gateway", synapse_argv("gateway"), env=env, ready_port=settings.api_port),
    ]


async def first_worker_ready(settings: Settings, timeout_s: float = 600) -> None:
    """Waits until a worker is READY with its startup models loaded (it serves each as soon as it has
    loaded it), so every one of the banner's examples answers at once."""
    client = async_client(settings)
    registry = WorkerRegistry(client, settings.heartbeat_s)
    wanted = set(startup_models(settings, lambda: catalog_of(settings).names()))  # the catalog is the store's
    try:
        async with asyncio.timeout(timeout_s):
            while not any(w.state is WorkerState.READY and wanted <= w.models for w in await registry.list()):
                await asyncio.sleep(0.5)
    finally:
        await client.aclose()


async def _registered_worker_ids(settings: Settings) -> set[str]:
    client = async_client(settings)
    try:
        async with asyncio.timeout(10):
            return {worker.id for worker in await WorkerRegistry(client, settings.heartbeat_s).list()}
    except (RedisError, OSError, TimeoutError) as exc:
        log.warning("could not list the registered workers: %s", exc)
        return set()
    finally:
        await client.aclose()


def worker_processes(worker_ids: set[str], redis_url: str) -> list[int]:
    """Processes of these workers (agent, Triton, stubs: all carry its environment) on this Redis."""
    return [
        pid
        for worker_id in sorted(worker_ids)
        for pid in processes_with_env({"SYNAPSE_WORKER_ID": worker_id, "SYNAPSE_REDIS_URL": redis_url})
    ]


async def stop_registered_workers(settings: Settings, timeout_s: float = WORKER_STOP_TIMEOUT_S) -> list[int]:
    """Stops the workers this stack's Redis still lists once its manager has stopped; returns their pids.

    A worker adopted through Redis (its manager was killed, a new one took it over) is no child of the
    new manager: its provider does not stop it, and it would serve on for good. Its agent gets SIGTERM
    (it drains, and stops its Triton), and after timeout_s everything of it left gets SIGKILL.
    """
    ids = await _registered_worker_ids(settings)
    found = worker_processes(ids, settings.redis_url)
    agents = [pid for pid in found if parent_of(pid) not in found]  # Triton and stubs follow their agent
    if not agents:
        return []
    log.info("stopping %d workers still registered (pids %s)", len(agents), agents)
    signal_all(agents, signal.SIGTERM)
    if await wait_gone(agents, timeout_s):
        log.warning("workers still running after %.0f s; killing them", timeout_s)
    signal_all(worker_processes(ids, settings.redis_url), signal.SIGKILL)  # looked up again: no pid reuse
    return agents


def url_with_password(url: str, password: str | None) -> str:
    """The Redis URL a client (redis-cli -u, a script) connects with."""
    if not password:
        return url
    parts = urlsplit(url)
    address = parts.netloc.rsplit("@", 1)[-1]
    return parts._replace(netloc=f":{quote(password, safe='')}@{address}").geturl()


def banner(settings: Settings) -> str:
    url = f"http://{settings.api_host}:{settings.api_port}"
    redis_url = url_with_password(settings.redis_url, settings.redis_auth_token)
    return f"""
Synapse is up.
  API          {url}
  API key      {settings.api_key}
  metrics      http://127.0.0.1:{settings.metrics_port}/metrics
  Prometheus   http://127.0.0.1:{settings.prometheus_port}  (rules and alerts: /rules, /alerts)
  Pushgateway  http://127.0.0.1:{settings.pushgateway_port}
  Redis        {redis_url}  (exporter: http://127.0.0.1:{settings.redis_exporter_port}/metrics)
  dashboards   import dashboards/*.json into Grafana, data source: this Prometheus

Submit a job and wait for its result:
  curl -s -X POST {url}/async-infer -H 'content-type: application/json' -H 'x-api-key: {settings.api_key}' \\
       -d '{{"model": "gpu-sim", "prompt": "The three", "parameters": {{"max_tokens": 16}}}}'
  curl -s '{url}/results/<jobId>?wait=5' -H 'x-api-key: {settings.api_key}'

Or speak OpenAI's API (any OpenAI client: base_url {url}/v1, api_key as above), here chatting with
SmolLM2-135M-Instruct, a real (small) instruct model:
  curl -s {url}/v1/chat/completions -H 'content-type: application/json' \\
       -H 'Authorization: Bearer {settings.api_key}' \\
       -d '{{"model": "{CHAT_MODEL}", "temperature": 0,
            "messages": [{{"role": "user", "content": "What is the capital of France?"}}]}}'

Stream its tokens as the engine produces them:
  curl -s -N {url}/v1/chat/completions -H 'content-type: application/json' \\
       -H 'Authorization: Bearer {settings.api_key}' \\
       -d '{{"model": "{CHAT_MODEL}", "stream": true, "max_tokens": 64,
            "messages": [{{"role": "user", "content": "The future of AI is"}}]}}'

Or OpenAI's Responses API, kept in Redis like a job: in the background it answers at once, queued,
and the response is read (or continued with previous_response_id) when it is done:
  curl -s {url}/v1/responses -H 'content-type: application/json' \\
       -H 'Authorization: Bearer {settings.api_key}' \\
       -d '{{"model": "{CHAT_MODEL}", "input": "Name three colours.", "background": true}}'
  curl -s {url}/v1/responses/<id> -H 'Authorization: Bearer {settings.api_key}'

Embed sentences with minilm, a real pretrained model (all-MiniLM-L6-v2; 384 numbers per text):
  curl -s {url}/v1/embeddings -H 'content-type: application/json' \\
       -H 'Authorization: Bearer {settings.api_key}' \\
       -d '{{"model": "minilm", "input": ["A cat sleeps on the sofa.", "A kitten naps on the couch."]}}'

The API's spec: {url}/openapi.json, and Swagger UI at {url}/docs (both need the key).

The key above is tenant `default`'s. Another tenant, with its own jobs, key and quotas:
  synapse keys create --tenant NAME [--max-inflight N] [--rate R] [--burst B]   (synapse keys --help)

Ctrl-C stops everything.
"""
