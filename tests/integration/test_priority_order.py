"""Priorities on the local stack: interactive jobs go ahead of a backlog of batch jobs, and the batch
jobs all run after them. Order is read from the platform's own timestamps, never from a stopwatch."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from contract.keys import job_key, stream_key
from tests.integration.conftest import Stack
from tests.integration.helpers import process_held
from tests.processes import wait_until

pytestmark = pytest.mark.integration

GPU_SIM = "gpu-sim"
BATCH_JOBS = 2000
INTERACTIVE_JOBS = 50


async def submit_all(stack: Stack, bodies: list[dict[str, Any]]) -> list[str]:
    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(headers={"x-api-key": stack.api_key}, connector=connector) as session:

        async def one(body: dict[str, Any]) -> str:
            async with session.post(f"{stack.api}/async-infer", json=body) as reply:
                assert reply.status == 202, await reply.text()
                return str((await reply.json())["jobId"])

        return list(await asyncio.gather(*(one(body) for body in bodies)))


def records(stack: Stack, ids: list[str]) -> list[dict[str, str]]:
    pipe = stack.redis().pipeline(transaction=False)
    for job_id in ids:
        pipe.hgetall(job_key(job_id))
    return list(pipe.execute())


def test_interactive_jobs_go_ahead_of_two_thousand_batch_jobs_queued_before_them(
    stack: Stack, capsys: pytest.CaptureFixture[str]
):
    redis = stack.redis()
    wait_until(lambda: redis.xlen(stream_key(GPU_SIM)) == 0, 60, "earlier tests' gpu-sim jobs to drain")
    batch = [{"model": GPU_SIM, "prompt": f"batch {i}", "priority": "batch"} for i in range(BATCH_JOBS)]
    interactive = [{"model": GPU_SIM, "prompt": f"now {i}"} for i in range(INTERACTIVE_JOBS)]
    # The manager held still, so that all 2,000 batch jobs are waiting when the interactive ones arrive.
    with process_held(stack.manager_pid):
        batch_ids = asyncio.run(submit_all(stack, batch))
        interactive_ids = asyncio.run(submit_all(stack, interactive))

    def all_final() -> bool:
        return all(
            r.get("status") in ("COMPLETED", "FAILED") for r in records(stack, batch_ids + interactive_ids)
        )

    wait_until(all_final, 240, "every job to end")
    batch_jobs, interactive_jobs = records(stack, batch_ids), records(stack, interactive_ids)
    assert {r["status"] for r in batch_jobs + interactive_jobs} == {"COMPLETED"}
    # A batch is the jobs one worker started at one instant.
    batch_only_batches = {(r["worker"], int(r["started_ms"])) for r in batch_jobs} - {
        (r["worker"], int(r["started_ms"])) for r in interactive_jobs
    }
    ahead = {
        job["id"]: [b for b in batch_only_batches if int(job["created_ms"]) <= b[1] < int(job["started_ms"])]
        for job in interactive_jobs
    }
    last_interactive = max(int(r["started_ms"]) for r in interactive_jobs)
    after = sum(int(r["started_ms"]) > last_interactive for r in batch_jobs)
    with capsys.disabled():
        print(
            f"\npriorities: {BATCH_JOBS} batch jobs queued, then {INTERACTIVE_JOBS} interactive; batch-only "
            f"batches started ahead of an interactive job: at most {max(len(a) for a in ahead.values())}; "
            f"batch jobs started after the last interactive one: {after}; batch-only batches: "
            f"{len(batch_only_batches)}"
        )
    # At most the one batch that was running or already sent when an interactive job came in.
    assert all(len(batches) <= 1 for batches in ahead.values()), ahead
    assert after > BATCH_JOBS // 2
