"""Priorities, in process against a real Redis: interactive jobs go ahead of a batch backlog queued before
them, batch jobs fill the room interactive batches leave, a batch job past half its time to its deadline
goes first, and batch jobs are taken over and handed back like any other."""

from __future__ import annotations

from typing import Any

from contract.jobs import Job, Priority, now_ms
from contract.keys import CONSUMER_GROUP, stream_key
from manager.queue import JobQueue
from tests.dispatcher.harness import JOB_TTL_S, Site, eventually


def submit(site: Site, prompt: str, priority: Priority, *, timeout_ms: int = 30_000) -> Job:
    """As the front door submits it: a batch job joins the model's batch stream."""
    job = Job.new(model=site.model, prompt=prompt, max_tokens=4, timeout_ms=timeout_ms, priority=priority)
    assert site.store.submit(job), "the front door refused the job"
    return job


async def pending(site: Site, priority: Priority) -> list[dict[str, Any]]:
    """The consumer group's pending entries in the stream of this priority."""
    rows: list[dict[str, Any]] = await site.redis.xpending_range(
        stream_key(site.model, priority), CONSUMER_GROUP, min="-", max="+", count=1000
    )
    return rows


async def test_interactive_jobs_queued_behind_a_batch_backlog_wait_for_one_batch_only(site: Site) -> None:
    worker = await site.add_worker(max_batch=8)
    manager = await site.start_manager()
    await site.wait_final([site.submit("warm-up")])  # the manager knows the model's batch size from now on
    worker.hold()
    backlog = [submit(site, f"batch {i}", Priority.BATCH) for i in range(40)]
    await worker.wait_for_batches(2)  # the worker was idle: what the manager read of them runs at once
    running = len(worker.batches[1])
    # A batch per worker waits in the manager, no more: the rest stays in the stream for any manager.
    await eventually(lambda: manager.dispatcher.batch_backlog == 8, "the next batch of batch jobs read")
    assert len(await pending(site, Priority.BATCH)) == running + 8

    interactive = [submit(site, f"interactive {i}", Priority.INTERACTIVE) for i in range(4)]
    await worker.wait_for_batches(3)
    worker.release()
    hashes = await site.wait_final([*backlog, *interactive])

    assert {h["status"] for h in hashes} == {"COMPLETED"}
    assert worker.batches[1] == [f"batch {i}" for i in range(running)], "one batch of batch jobs, in order"
    # Next, the interactive jobs, topped up with batch jobs to the batch's room.
    topped_up = [f"batch {i}" for i in range(running, running + 4)]
    assert worker.batches[2] == [*(j.prompt for j in interactive), *topped_up]
    assert sorted(worker.prompts) == sorted(["warm-up", *(j.prompt for j in [*backlog, *interactive])])
    assert await pending(site, Priority.BATCH) == [] and await site.pending() == []
    assert await site.redis.xlen(stream_key(site.model, Priority.BATCH)) == 0


async def test_a_batch_job_past_half_its_time_goes_ahead_of_interactive_jobs(site: Site) -> None:
    worker = await site.add_worker(max_batch=4)
    worker.hold()
    await site.start_manager()
    first = [submit(site, f"first {i}", Priority.INTERACTIVE) for i in range(8)]
    await worker.wait_for_batches(2)  # two full interactive batches hold both slots

    urgent = submit(site, "urgent batch", Priority.BATCH, timeout_ms=1_500)
    patient = submit(site, "patient batch", Priority.BATCH, timeout_ms=60_000)
    later = [submit(site, f"later {i}", Priority.INTERACTIVE) for i in range(8)]
    # Interactive jobs fill every batch: a batch job would only run once they stop, but for its deadline.
    await eventually(lambda: now_ms() > urgent.created_ms + 1_000, "past half the urgent job's time")
    worker.release()
    hashes = await site.wait_final([*first, urgent, patient, *later])

    assert {h["status"] for h in hashes} == {"COMPLETED"}, "the urgent job started before its deadline"
    # The two batches cut when the slots freed up (they reach the worker in either order).
    assert sorted(worker.batches[2:4]) == [
        ["later 3", "later 4", "later 5", "later 6"],
        ["urgent batch", "later 0", "later 1", "later 2"],
    ]
    assert worker.batches[4] == ["later 7", "patient batch"], "the other fills the room the last one leaves"


async def test_a_dead_manager_s_batch_jobs_are_taken_over_with_its_interactive_ones(site: Site) -> None:
    dead = JobQueue(site.redis, "manager-dead", JOB_TTL_S)
    await dead.ensure_group(site.model)
    jobs = [submit(site, f"{p} {i}", p) for p in Priority for i in range(2)]
    assert len(await dead.read(site.model, count=10, block_ms=100)) == 4  # both streams, never acked
    worker = await site.add_worker()

    await site.start_manager("manager-live", reclaim_idle_s=0.3)
    hashes = await site.wait_final(jobs)

    assert {(h["status"], h["runs"], h["manager"]) for h in hashes} == {("COMPLETED", "1", "manager-live")}
    assert sorted(worker.prompts) == sorted(j.prompt for j in jobs)
    assert await pending(site, Priority.BATCH) == [] and await site.pending() == []


async def test_drain_hands_back_the_batch_jobs_it_could_not_run(site: Site) -> None:
    worker = await site.add_worker(max_batch=2)
    worker.hold()
    jobs = [submit(site, f"batch {i}", Priority.BATCH) for i in range(4)]
    leaving = await site.start_manager("manager-a", reclaim_idle_s=2.0, max_inflight=1)
    await worker.wait_for_batches(1)
    await eventually(lambda: leaving.dispatcher.batch_backlog == 2, "the next batch read")

    await leaving.stop(drain_s=0.2)  # the worker never answers within it

    handed_back = await pending(site, Priority.BATCH)
    assert len(handed_back) == 4 and {e["consumer"] for e in handed_back} == {"manager-a"}
    worker.release()
    await site.start_manager("manager-b", reclaim_idle_s=2.0)
    hashes = await site.wait_final(jobs)
    assert {(h["status"], h["manager"]) for h in hashes} == {("COMPLETED", "manager-b")}
    assert await pending(site, Priority.BATCH) == []
