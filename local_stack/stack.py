"""What `synapse up` runs: the whole platform on this machine, with real parts."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

from contract.redis_client import async_client
from contract.settings import Settings
from contract.workers import WorkerRegistry, WorkerState
from local_stack.monitoring import (
    local_prometheus_config,
    local_targets,
    prometheus_argv,
    pushgateway_argv,
    redis_exporter_argv,
    write_prometheus_config,
)
from local_stack.supervisor import ProcessSpec


def redis_argv(port: int, data_dir: Path) -> list[str]:
    """A project-owned Redis on loopback: AOF on, fsync every second (the durability promise)."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    data_dir.mkdir(parents=True, exist_ok=True)
    return [
        binary,
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
    """The local gateway's key: SYNAPSE_API_KEY if set, else a fresh one for this run."""
    if settings.api_key:
        return settings
    return settings.model_copy(update={"api_key": "sk-local-" + secrets.token_urlsafe(18)})


def for_local_stack(settings: Settings, environ: Mapping[str, str]) -> Settings:
    """`make up` scales local worker processes and keeps one warm unless told otherwise."""
    update: dict[str, object] = {"worker_provider": "local"}
    if "SYNAPSE_MIN_WORKERS" not in environ:
        update["min_workers"] = 1
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
    env = settings.to_env()
    # The Pushgateway starts before the manager's workers and stops after them: they delete their groups.
    return [
        ProcessSpec("redis", redis_argv(redis_port, settings.state_dir / "redis"), ready_port=redis_port),
        *monitoring_specs(settings),
        ProcessSpec(
            "manager", synapse_argv("manager"), env=env, ready_port=settings.metrics_port, stop_timeout_s=60
        ),
        ProcessSpec("gateway", synapse_argv("gateway"), env=env, ready_port=settings.api_port),
    ]


async def first_worker_ready(settings: Settings, timeout_s: float = 600) -> None:
    """Waits until a worker is READY, so the banner's curl example answers at once."""
    client = async_client(settings)
    registry = WorkerRegistry(client, settings.heartbeat_s)
    try:
        async with asyncio.timeout(timeout_s):
            while not any(w.state is WorkerState.READY for w in await registry.list()):
                await asyncio.sleep(0.5)
    finally:
        await client.aclose()


def banner(settings: Settings) -> str:
    url = f"http://{settings.api_host}:{settings.api_port}"
    return f"""
Synapse is up.
  API          {url}
  API key      {settings.api_key}
  metrics      http://127.0.0.1:{settings.metrics_port}/metrics
  Prometheus   http://127.0.0.1:{settings.prometheus_port}  (rules and alerts: /rules, /alerts)
  Pushgateway  http://127.0.0.1:{settings.pushgateway_port}
  Redis        {settings.redis_url}  (exporter: http://127.0.0.1:{settings.redis_exporter_port}/metrics)
  dashboards   import dashboards/*.json into Grafana, data source: this Prometheus

Submit a job and wait for its result:
  curl -s -X POST {url}/async-infer -H 'content-type: application/json' -H 'x-api-key: {settings.api_key}' \\
       -d '{{"model": "gpu-sim", "prompt": "The three", "parameters": {{"max_tokens": 16}}}}'
  curl -s '{url}/results/<jobId>?wait=5' -H 'x-api-key: {settings.api_key}'

Or speak OpenAI's API (any OpenAI client: base_url {url}/v1, api_key as above):
  curl -s {url}/v1/chat/completions -H 'content-type: application/json' \\
       -H 'Authorization: Bearer {settings.api_key}' \\
       -d '{{"model": "gpu-sim", "messages": [{{"role": "user", "content": "Hello"}}]}}'

The API's spec: {url}/openapi.json, and Swagger UI at {url}/docs (both need the key).

Ctrl-C stops everything.
"""
