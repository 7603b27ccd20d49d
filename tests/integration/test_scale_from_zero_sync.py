"""A `/v1` call while no worker is READY: a 503 with Retry-After, nothing queued, and the pool woken.

The session stack's one worker is held (its agent paused, so its registration lapses as a dead one's
would), which is the pool at zero as the front door sees it; it resumes and is READY again after.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import requests

from contract.keys import wake_key, worker_key
from contract.settings import Settings
from frontdoor.capacity import READY_REUSE_S
from tests.integration.conftest import Stack
from tests.integration.helpers import entries_added
from tests.processes import wait_until

pytestmark = pytest.mark.integration

WORKER = "worker-a"  # the stack's one worker
MODEL = "gpu-sim"


def agent_pid(worker_id: str, state_dir: Path) -> int:
    """This session's agent process for the worker: a child of the test process, by its environment."""
    wanted = {f"SYNAPSE_WORKER_ID={worker_id}".encode(), f"SYNAPSE_STATE_DIR={state_dir}".encode()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = set((entry / "environ").read_bytes().split(b"\0"))
        except (OSError, IndexError, ValueError):
            continue
        if parent == os.getpid() and b"worker" in cmdline and wanted <= environ:
            return int(entry.name)
    raise LookupError(f"no agent process for {worker_id} under this test process")


@pytest.fixture
def no_ready_worker(stack: Stack) -> Iterator[None]:
    """Pauses the worker's agent until its registration expires; resumes it and waits for READY."""
    client = stack.redis()
    pid = agent_pid(WORKER, stack.state_dir)
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: client.hget(worker_key(WORKER), "state") is None, 30, "the registration to lapse")
        time.sleep(READY_REUSE_S)  # the gateway's last READY answer is reused this long
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
        wait_until(lambda: client.hget(worker_key(WORKER), "state") == "READY", 60, f"{WORKER} READY again")
        client.delete(wake_key(MODEL))


def test_a_v1_call_with_no_ready_worker_gets_503_retry_after_queues_nothing_and_wakes_the_pool(
    stack: Stack, no_ready_worker: None
):
    client = stack.redis()
    client.delete(wake_key(MODEL))
    before = entries_added(client)
    response = requests.post(
        f"{stack.api}/v1/completions",
        json={"model": MODEL, "prompt": "hello from zero"},
        headers={"Authorization": f"Bearer {stack.api_key}"},
        timeout=30,
    )
    assert response.status_code == 503
    assert response.headers["Retry-After"] == str(Settings().cold_start_retry_after_s)
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "capacity_starting")
    assert entries_added(client) == before, "nothing was queued"
    assert client.exists(wake_key(MODEL)), "the autoscaler is told the model is wanted"

    sdk = openai.OpenAI(base_url=f"{stack.api}/v1", api_key=stack.api_key, max_retries=0)
    with pytest.raises(openai.APIStatusError) as refused:
        sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.status_code == 503
    assert refused.value.response.headers["Retry-After"] == response.headers["Retry-After"]
    assert entries_added(client) == before


def test_async_submissions_at_zero_are_still_queued(stack: Stack, no_ready_worker: None):
    client = stack.redis()
    before = entries_added(client)
    response = requests.post(
        f"{stack.api}/async-infer",
        json={"model": MODEL, "prompt": "queued at zero"},
        headers={"x-api-key": stack.api_key},
        timeout=30,
    )
    assert response.status_code == 202
    assert entries_added(client) == before + 1
