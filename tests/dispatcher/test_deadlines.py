"""Deadlines and bounds, in process against a real Redis: a job fails `deadline_exceeded` when its
deadline passes, whether it was still waiting for a worker or its worker hangs, and its outcome does not
wait for the worker to answer; a worker that stops answering has its batch retried elsewhere long
before the jobs' deadlines, once the model's batch time is known."""

from __future__ import annotations

import json

import pytest

from manager import one_shot
from manager.outcomes import DEADLINE_EXCEEDED
from tests.dispatcher.harness import Site


async def test_a_job_no_worker_serves_fails_at_its_deadline(site: Site) -> None:
    job = site.submit("nobody runs this", timeout_ms=300)
    manager = await site.start_manager()

    [final] = await site.wait_final([job])

    assert (final["status"], final["error_code"]) == ("FAILED", DEADLINE_EXCEEDED)
    assert "before it could run" in final["error_message"]
    assert "runs" not in final  # it never ran
    assert await site.done_signals(job) == 1
    assert await site.dead_letters() == []  # out of time, not out of attempts
    assert await site.pending() == []
    assert await site.stream_length() == 0
    assert manager.dispatcher.backlog == 0


async def test_a_batch_that_outlives_its_deadlines_fails_without_its_worker(site: Site) -> None:
    worker = await site.add_worker()
    worker.hold()  # hangs: never answers on its own
    jobs = [site.submit(f"prompt {i}", timeout_ms=1000) for i in range(2)]
    await site.start_manager()

    hashes = await site.wait_final(jobs)

    assert {(h["status"], h["error_code"]) for h in hashes} == {("FAILED", DEADLINE_EXCEEDED)}
    assert all("while it ran" in h["error_message"] for h in hashes)
    assert [h["runs"] for h in hashes] == ["1", "1"]
    assert worker.held  # the outcomes did not wait for the worker
    assert worker.cancelled == 1  # its call was cancelled, not left to run on
    assert worker.sizes == [2]
    assert [await site.done_signals(j) for j in jobs] == [1, 1]
    assert await site.pending() == []
    assert await site.stream_length() == 0


async def test_a_hung_worker_s_batch_goes_elsewhere_long_before_its_deadlines(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(one_shot, "STALL_FLOOR_S", 0.2)  # production: 5 s
    hung = await site.add_worker("a")
    await site.start_manager()
    [first] = await site.wait_final([site.submit("measures the model's batch time")])
    assert first["status"] == "COMPLETED"
    hung.hold()  # from now on it never answers
    healthy = await site.add_worker("b")
    jobs = [site.submit(f"prompt {i}", timeout_ms=60_000) for i in range(2)]

    hashes = await site.wait_final(jobs, timeout_s=10)

    assert [h["status"] for h in hashes] == ["COMPLETED", "COMPLETED"]
    assert [json.loads(h["result"])["text"] for h in hashes] == [f"{healthy.id}:{j.prompt}" for j in jobs]
    assert hung.cancelled == 1  # its call was given up, not left to run on
    assert [await site.done_signals(j) for j in jobs] == [1, 1]
    assert await site.pending() == []
