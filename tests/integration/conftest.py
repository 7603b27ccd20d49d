"""Session fixtures: a real Triton worker, the manager and the gateway, as processes.

The real Redis they share (`redis_url`) and the log folder (`logs`) come from `tests/conftest.py`.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from local_stack.monitoring import pushgateway_argv
from tests.models import served_by_tests
from tests.processes import free_port, port_open, start, stop, synapse, wait_until

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

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url, decode_responses=True)


def base_env(redis_url: str, state_dir: Path) -> dict[str, str]:
    return {
        "SYNAPSE_REDIS_URL": redis_url,
        "SYNAPSE_STATE_DIR": str(state_dir),
        "SYNAPSE_MODEL_REPOSITORY": str(served_by_tests()),  # gpu-sim with its fault markers on
        "SYNAPSE_LOG_LEVEL": "INFO",
    }


def start_worker(
    env: dict[str, str], worker_id: str, logs: Path, models: str = ""
) -> subprocess.Popen[bytes]:
    """A worker process (agent + Triton) on free ports; returns once it is READY in the registry."""
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
    client = redis.Redis.from_url(env["SYNAPSE_REDIS_URL"], decode_responses=True)
    wait_until(
        lambda: client.hget(f"synapse:worker:{worker_id}", "state") == "READY",
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
    redis_url: str, pushgateway: str, tmp_path_factory: pytest.TempPathFactory, logs: Path
) -> Iterator[Stack]:
    """The platform with one worker serving every model, one manager and the gateway."""
    state_dir = tmp_path_factory.mktemp("state")
    env = {**base_env(redis_url, state_dir), "SYNAPSE_PUSHGATEWAY_URL": pushgateway}
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
        manager_metrics_port=metrics_port, pushgateway_url=pushgateway,
    )  # fmt: skip
    for proc in (gateway, manager, worker):
        stop(proc)
