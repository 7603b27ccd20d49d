"""The workers a manager started go when it dies (issue 41, item 2): after `kill -9` of a manager, its
local workers (agent, Triton, the Triton's stubs) stop and deregister on their own (the parent-death
signal is their SIGTERM), rather than run beside the workers the next manager starts."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from contract.keys import WORKERS_KEY, worker_key
from contract.processes import alive
from tests.integration.conftest import base_env, env_client
from tests.processes import free_port, session_members, start, stop, synapse, wait_until

pytestmark = [pytest.mark.integration]

DATABASE = 10  # apart from the other suites' (0, 1, 3, 4, 5, 7, 8, 9): this manager sees only its worker
# The test's bound on the workers' exit; what they take is printed. A clean shutdown is bounded by the
# agent's SHUTDOWN_BOUND_S (33 s); a READY gpu-sim worker takes a few seconds.
GONE_DEADLINE_S = 60.0


def test_the_workers_of_a_manager_killed_with_9_stop_and_deregister(redis_url: str, tmp_path: Path) -> None:
    env = {
        **base_env(redis_url.rsplit("/", 1)[0] + f"/{DATABASE}", tmp_path / "state"),
        "SYNAPSE_MODELS": "gpu-sim",
        "SYNAPSE_WORKER_MODELS": "gpu-sim",
        "SYNAPSE_WORKER_PROVIDER": "local",
        "SYNAPSE_MIN_WORKERS": "1",
        "SYNAPSE_MAX_WORKERS": "1",
        "SYNAPSE_WARM_POOL_SIZE": "0",
        "SYNAPSE_METRICS_PORT": str(free_port()),
    }
    client = env_client(env)
    log = tmp_path / "manager.log"
    manager = start(synapse("manager"), env, log)
    members: list[int] = []
    try:

        def registered() -> list[str]:
            return [w for w in client.smembers(WORKERS_KEY) if client.exists(worker_key(w))]  # type: ignore[union-attr]

        wait_until(
            lambda: any(client.hget(worker_key(w), "state") == "READY" for w in registered()),
            180, "the manager's worker to be READY", manager, log,
        )  # fmt: skip
        members = [pid for pid in session_members(manager.pid) if pid != manager.pid]
        assert members, "the manager's worker runs in its session"
        manager.send_signal(signal.SIGKILL)
        manager.wait(10)
        killed = time.monotonic()
        wait_until(lambda: not any(alive(pid) for pid in members), GONE_DEADLINE_S, "the workers to stop")
        gone_s = time.monotonic() - killed
        assert registered() == [], "the workers deregistered as they stopped"
        print(f"\nMANAGER DEATH: {len(members)} worker processes gone {gone_s:.1f} s after kill -9")
    finally:
        stop(manager)
        for pid in members:  # only where the claim failed: nothing of the test's stays behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        client.flushdb()
