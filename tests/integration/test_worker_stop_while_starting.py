"""A worker told to stop while it still starts (its manager died, and the parent-death signal is its
SIGTERM) stops then, not once its models have loaded: a worker loading SmolLM2 on two cores would
otherwise go on for a minute, become READY and only then drain, beside the workers the next manager
starts. It never becomes READY, and leaves no Triton behind."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from contract.catalog import CHAT_MODEL
from contract.keys import worker_key
from contract.processes import alive
from tests.integration.conftest import base_env, env_client
from tests.processes import free_port, session_members, start, stop, synapse, wait_until

pytestmark = [pytest.mark.integration]

STOP_DEADLINE_S = 60.0  # the test's bound on the worker's exit; the claim is that it never became READY


def test_a_worker_told_to_stop_while_its_models_load_stops_then(redis_url: str, tmp_path: Path) -> None:
    env = {
        **base_env(redis_url, tmp_path / "state"),
        "SYNAPSE_WORKER_ID": "worker-stopped-early",
        "SYNAPSE_WORKER_MODELS": CHAT_MODEL,  # the slowest to load: the worker starts for a while
        "SYNAPSE_TRITON_HTTP_PORT": str(free_port()),
        "SYNAPSE_TRITON_GRPC_PORT": str(free_port()),
        "SYNAPSE_TRITON_METRICS_PORT": str(free_port()),
    }
    log = tmp_path / "worker.log"
    key = worker_key("worker-stopped-early")
    worker = start(synapse("worker"), env, log)
    client = env_client(env)
    try:
        wait_until(lambda: "starting Triton" in log.read_text(), 120, "Triton to start", worker, log)
        # it registers just after it logs the start: on a loaded machine, not yet when the log shows it
        wait_until(lambda: client.exists(key), 30, "the worker to register", worker, log)
        assert client.hget(key, "state") == "STARTING"
        members = session_members(worker.pid)  # the agent, Triton and its stubs
        worker.send_signal(signal.SIGTERM)
        worker.wait(STOP_DEADLINE_S)
        assert " READY " not in log.read_text(), "it went on starting after it was told to stop"
        assert "stopped while starting" in log.read_text()
        wait_until(lambda: not any(alive(pid) for pid in members), 10, "its Triton to be gone")
        assert not client.exists(key), "it deregistered"
    finally:
        stop(worker)
