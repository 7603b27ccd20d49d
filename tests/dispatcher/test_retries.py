"""Failed batches, in process against a real Redis: what is retried where, what is given up and dead-lettered.

A batch that fails at the worker (transport fault, a client that breaks, a call cancelled under the
dispatcher) goes elsewhere as it was; a batch the model rejects runs again one job at a time, so a
poison prompt fails alone; a job out of attempts ends FAILED and lands in the dead-letter stream.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
import redis.exceptions

from contract.jobs import Job
from manager.outcomes import MAX_ATTEMPTS_EXCEEDED
from manager.queue import JobQueue
from tests.dispatcher.harness import Site
from tests.dispatcher.workers import Failure, call_cancelled, crash, transport_fault


async def assert_nothing_left(site: Site) -> None:
    """Every entry acknowledged and deleted: no manager holds anything, nothing waits in the stream."""
    assert await site.pending() == []
    assert await site.stream_length() == 0


@pytest.mark.parametrize("failure", [transport_fault, crash], ids=["transport-fault", "crash"])
async def test_a_batch_that_fails_at_the_worker_runs_again_on_another(site: Site, failure: Failure) -> None:
    broken = await site.add_worker("a")
    healthy = await site.add_worker("b")
    broken.fail_next(failure)
    jobs = [site.submit(f"prompt {i}") for i in range(3)]
    await site.start_manager()

    hashes = await site.wait_final(jobs)

    assert [h["status"] for h in hashes] == ["COMPLETED"] * 3
    assert [json.loads(h["result"])["text"] for h in hashes] == [f"{healthy.id}:{j.prompt}" for j in jobs]
    assert broken.batches == [[j.prompt for j in jobs]]
    assert healthy.batches == [[j.prompt for j in jobs]]  # the same batch, as it was
    assert [await site.done_signals(j) for j in jobs] == [1, 1, 1]
    assert await site.dead_letters() == []
    await assert_nothing_left(site)


async def test_a_batch_that_keeps_failing_is_given_up_and_dead_lettered(site: Site) -> None:
    worker = await site.add_worker()
    worker.fail_always(transport_fault)
    site.heartbeats()  # the suspected worker heartbeats again, so each retry finds it back in the pool
    jobs = [site.submit(f"prompt {i}") for i in range(2)]
    await site.start_manager(max_attempts=3)

    hashes = await site.wait_final(jobs)

    assert {h["status"] for h in hashes} == {"FAILED"}
    assert {h["error_code"] for h in hashes} == {MAX_ATTEMPTS_EXCEEDED}
    assert all("gave up after 3 attempts" in h["error_message"] for h in hashes)
    assert all("UNAVAILABLE" in h["error_message"] for h in hashes)  # the last error, for the operator
    assert worker.sizes == [2, 2, 2]
    dead = await site.dead_letters()
    assert sorted(d["id"] for d in dead) == sorted(j.id for j in jobs)
    assert {d["error_code"] for d in dead} == {MAX_ATTEMPTS_EXCEEDED}
    assert [await site.done_signals(j) for j in jobs] == [1, 1]
    await assert_nothing_left(site)


async def test_a_poison_job_fails_alone(site: Site) -> None:
    worker = await site.add_worker(poison="poison")
    prompts = ["alpha", "beta", "poison", "gamma"]
    jobs = [site.submit(p) for p in prompts]
    await site.start_manager(max_attempts=3)

    hashes = dict(zip(prompts, await site.wait_final(jobs), strict=True))

    for prompt in ("alpha", "beta", "gamma"):
        assert hashes[prompt]["status"] == "COMPLETED"
        assert json.loads(hashes[prompt]["result"])["text"] == f"{worker.id}:{prompt}"
        assert hashes[prompt]["batch_size"] == "1"
    poison = hashes["poison"]
    assert (poison["status"], poison["error_code"]) == ("FAILED", MAX_ATTEMPTS_EXCEEDED)
    assert "rejected the batch" in poison["error_message"]
    assert worker.sizes[0] == 4  # the batch as first cut, which the model rejected as a whole
    assert set(worker.sizes[1:]) == {1}  # then every job alone
    assert worker.prompts.count("poison") == 3  # one try per attempt
    assert all(worker.prompts.count(p) == 2 for p in ("alpha", "beta", "gamma"))
    assert [d["id"] for d in await site.dead_letters()] == [jobs[2].id]
    await assert_nothing_left(site)


async def test_a_call_cancelled_under_the_dispatcher_is_a_worker_fault(site: Site) -> None:
    """grpc.aio raises CancelledError from a call whose channel the fleet closed (its worker left the
    pool) although the batch's task was not cancelled: the jobs must run again, not stay RUNNING."""
    worker = await site.add_worker()
    worker.fail_next(call_cancelled)
    site.heartbeats()
    jobs = [site.submit(f"prompt {i}") for i in range(3)]
    await site.start_manager()

    hashes = await site.wait_final(jobs)

    assert [h["status"] for h in hashes] == ["COMPLETED"] * 3
    assert worker.sizes == [3, 3]
    assert [await site.done_signals(j) for j in jobs] == [1, 1, 1]
    await assert_nothing_left(site)


async def test_a_job_whose_start_redis_missed_still_records_its_run(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis away at the moment a batch starts (a kill or a failover): the batch runs all the same, and its
    run is recorded with its outcome, so no job ends COMPLETED with `runs` 0 and no worker named."""
    worker = await site.add_worker()
    marked = JobQueue.mark_running
    tries = 0

    async def away_once(queue: JobQueue, jobs: Sequence[Job], started_ms: int, worker_id: str) -> set[str]:
        nonlocal tries
        tries += 1
        if tries == 1:
            raise redis.exceptions.ConnectionError("Connection refused")
        return await marked(queue, jobs, started_ms, worker_id)

    monkeypatch.setattr(JobQueue, "mark_running", away_once)
    jobs = [site.submit(f"prompt {i}") for i in range(2)]
    await site.start_manager()

    hashes = await site.wait_final(jobs)

    assert tries >= 1
    assert [h["status"] for h in hashes] == ["COMPLETED"] * 2
    assert [h.get("runs") for h in hashes] == ["1", "1"]
    assert [h.get("worker") for h in hashes] == [worker.id] * 2
    assert all(h.get("manager") for h in hashes)
    await assert_nothing_left(site)
