"""A synchronous `/v1` call whose job is still not done when its wait ends answers 504 with the jobId,
and its job is cancelled then: nobody waits for it, so no worker computes it to the end (issue 30,
point 9). A gateway of the test's own waits `WAIT_S`; the manager is held still (SIGSTOP) so that the
job waits unread past the call's wait, then released: the job stays CANCELLED and never runs."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.integration.conftest import Stack
from tests.integration.helpers import api, final, process_held, start_gateway, submit
from tests.integration.test_job_control import inferences_on_workers
from tests.processes import stop, wait_until

pytestmark = pytest.mark.integration

WAIT_S = 1.0
GPU_SIM = "gpu-sim"


@pytest.fixture(scope="module")
def gateway(stack: Stack) -> Iterator[str]:
    proc, base = start_gateway(
        stack.env, stack.api_key, stack.logs, "gateway-short-wait", sync_timeout_s=str(WAIT_S)
    )
    yield base
    stop(proc)


def completion(base: str, key: str) -> tuple[int, dict[str, object]]:
    body = json.dumps({"model": GPU_SIM, "prompt": "nobody waits for me", "max_tokens": 4}).encode()
    request = urllib.request.Request(
        f"{base}/v1/completions", data=body, method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_job_whose_synchronous_call_timed_out_is_cancelled_and_never_runs(stack: Stack, gateway: str):
    ran_before = inferences_on_workers(stack, GPU_SIM)
    with process_held(stack.manager_pid):
        status, body = completion(gateway, stack.api_key)
        assert status == 504, body
        error = body["error"]
        assert isinstance(error, dict) and error["code"] == "timeout"
        job_id = str(body.get("jobId") or error.get("jobId") or "")
        assert job_id, body
    client = api(stack)
    assert final(client, job_id)["status"] == "CANCELLED"
    # A job sent after it completes once the manager has read past it: the worker ran that one alone
    # (Triton's count may lag its reply a little).
    assert final(client, submit(client, "after the cancelled one"))["status"] == "COMPLETED"
    wait_until(lambda: inferences_on_workers(stack, GPU_SIM) >= ran_before + 1, 10, "Triton's count")
    assert inferences_on_workers(stack, GPU_SIM) == ran_before + 1
