"""Session fixtures: a real Triton worker, the manager and the gateway, as processes.

The stack runs twice, on the two stores it meets: a plain Redis (`redis_url`, the local stack) and a
Redis Cluster (`redis_cluster`, as ElastiCache Serverless runs), both from `tests/conftest.py`. Every
test that uses the stack runs on each (ids `redis` and `redis-cluster`); pytest groups the tests by
store, so each store's stack starts once and stops before the other's starts. Tests with a Redis of
their own (fault stacks that restart it, the model store's database) choose their own.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from contract.catalog_build import catalog_of
from contract.keys import worker_key
from contract.redis_client import SyncRedis
from contract.settings import Settings
from contract.workers import startup_models
from local_stack.monitoring import pushgateway_argv
from tests.models import served_by_tests, shared_checkpoints
from tests.processes import free_port, port_open, start, stop, synapse, wait_until
from tests.redis_cluster import LocalRedisCluster, sync_test_client

WORKER_READY_TIMEOUT_S = 300


@dataclass
class Stack:
    """What a test needs to reach the running platform."""

    api: str
    api_key: str
    redis_url: str
    state_dir: Path
    env: dict[str, str]
    logs: Path
    manager_metrics_port: int = 0
    pushgateway_url: str = ""
    cluster: bool = False
    manager_pid: int = 0  # to hold the manager still (SIGSTOP) while jobs wait unread in their stream

    def redis(self) -> SyncRedis:
        return sync_test_client(self.redis_url, cluster=self.cluster)


@dataclass(frozen=True)
class RedisTarget:
    """The store a stack runs on: its URL, and whether the platform must speak Redis Cluster to it."""

    url: str
    cluster: bool


# For a test whose subject is not the store: the front door's HTTP behaviour (its lanes and limits, the
# spec), a model's answers, a runner's rules shown on thousands of lines. On a Redis Cluster it would run
# the same requests again and find nothing new, while the suite's time is what every change waits for.
PLAIN_REDIS_ONLY = pytest.mark.parametrize("redis_target", ["plain"], ids=["redis"], indirect=True)


@pytest.fixture(scope="session", params=["plain", "cluster"], ids=["redis", "redis-cluster"])
def redis_target(request: pytest.FixtureRequest) -> RedisTarget:
    """Looked up by name, so that the cluster starts only when the first test on it runs."""
    if request.param == "cluster":
        cluster: LocalRedisCluster = request.getfixturevalue("redis_cluster")
        return RedisTarget(cluster.url, cluster=True)
    return RedisTarget(request.getfixturevalue("redis_url"), cluster=False)


def env_client(env: dict[str, str]) -> SyncRedis:
    """A client to the store a process with this environment uses."""
    return sync_test_client(env["SYNAPSE_REDIS_URL"], cluster=env.get("SYNAPSE_REDIS_CLUSTER") == "true")


def base_env(redis_url: str, state_dir: Path, *, cluster: bool = False) -> dict[str, str]:
    return {
        "SYNAPSE_REDIS_URL": redis_url,
        "SYNAPSE_REDIS_CLUSTER": str(cluster).lower(),
        "SYNAPSE_STATE_DIR": str(state_dir),
        "SYNAPSE_MODEL_REPOSITORY": str(served_by_tests()),  # gpu-sim with its fault markers on
        "SYNAPSE_CHECKPOINT_DIR": str(shared_checkpoints()),
        "SYNAPSE_LOG_LEVEL": "INFO",
        # The tests' callback receivers listen on loopback, an address callbacks may reach only if allowed.
        "SYNAPSE_CALLBACK_ALLOWED_NETWORKS": "127.0.0.0/8",
    }


def start_worker(
    env: dict[str, str], worker_id: str, logs: Path, models: str = ""
) -> subprocess.Popen[bytes]:
    """A worker process (agent + Triton) on free ports; returns once it is READY in the registry with
    every model it starts with loaded (it is READY with the first)."""
    worker_env = {
        **env,
        "SYNAPSE_WORKER_ID": worker_id,
        "SYNAPSE_TRITON_HTTP_PORT": str(free_port()),
        "SYNAPSE_TRITON_GRPC_PORT": str(free_port()),
        "SYNAPSE_TRITON_METRICS_PORT": str(free_port()),
    }
    if models:
        worker_env["SYNAPSE_WORKER_MODELS"] = models
    log = logs / f"{worker_id}.log"
    proc = start(synapse("worker"), worker_env, log)
    client = env_client(env)
    settings = Settings.from_env(worker_env)
    wanted = set(startup_models(settings, lambda: catalog_of(settings).names()))

    def serving() -> bool:
        fields = client.hmget(worker_key(worker_id), ["state", "models"])
        return fields[0] == "READY" and wanted <= set((fields[1] or "").split(","))

    wait_until(
        serving,
        WORKER_READY_TIMEOUT_S, f"worker {worker_id}", proc, log,
    )  # fmt: skip
    return proc


def start_manager(
    env: dict[str, str], name: str, logs: Path, metrics_port: int | None = None
) -> subprocess.Popen[bytes]:
    port = metrics_port or free_port()
    log = logs / f"{name}.log"
    proc = start(synapse("manager"), {**env, "SYNAPSE_METRICS_PORT": str(port)}, log)
    wait_until(lambda: port_open(port), 60, name, proc, log)
    return proc


@pytest.fixture(scope="session")
def pushgateway(logs: Path) -> Iterator[str]:
    """A Pushgateway of the tests' own, so no test worker pushes into a developer's local stack."""
    if shutil.which("prometheus-pushgateway") is None:
        pytest.fail("prometheus-pushgateway is not installed: run `make test`, which installs it")
    port = free_port()
    proc = start(pushgateway_argv(port), {}, logs / "pushgateway.log")
    wait_until(lambda: port_open(port), 30, "pushgateway", proc, logs / "pushgateway.log")
    yield f"http://127.0.0.1:{port}"
    stop(proc)


@pytest.fixture(scope="session")
def stack(
    redis_target: RedisTarget, pushgateway: str, tmp_path_factory: pytest.TempPathFactory, logs: Path
) -> Iterator[Stack]:
    """The platform with one worker serving every model, one manager and the gateway."""
    state_dir = tmp_path_factory.mktemp("state")
    redis_url = redis_target.url
    env = base_env(redis_url, state_dir, cluster=redis_target.cluster)
    env["SYNAPSE_PUSHGATEWAY_URL"] = pushgateway
    worker = start_worker(env, "worker-a", logs)
    metrics_port = free_port()
    manager = start_manager(env, "manager", logs, metrics_port)
    api_port = free_port()
    gateway_log = logs / "gateway.log"
    api_key = "sk-test-" + secrets.token_urlsafe(12)
    gateway_env = {**env, "SYNAPSE_API_PORT": str(api_port), "SYNAPSE_API_KEY": api_key}
    gateway = start(synapse("gateway"), gateway_env, gateway_log)
    wait_until(lambda: port_open(api_port), 60, "gateway", gateway, gateway_log)
    yield Stack(
        f"http://127.0.0.1:{api_port}", api_key, redis_url, state_dir, env, logs,
        manager_metrics_port=metrics_port, pushgateway_url=pushgateway, cluster=redis_target.cluster,
        manager_pid=manager.pid,
    )  # fmt: skip
    for proc in (gateway, manager, worker):
        stop(proc)
