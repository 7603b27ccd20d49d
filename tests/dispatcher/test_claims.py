"""Who holds a job, in process against a real Redis: claims renewed, taken over, and handed back.

A live manager renews its claim on what it holds, however long a batch runs, so no other manager
takes its jobs; the jobs of a manager that died are taken over once idle long enough and run once;
a manager shutting down finishes its batch in flight and hands back what it could not run, for
another manager to take over at once.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from contract.keys import CONSUMER_GROUP, stream_key
from contract.redis_client import SyncRedis
from manager import dispatcher
from manager.dispatcher import RELEASE_IDLE_FACTOR
from manager.outcomes import MAX_ATTEMPTS_EXCEEDED
from manager.queue import Delivery, JobQueue
from tests.dispatcher.conftest import client_name
from tests.dispatcher.harness import JOB_TTL_S, WAIT_S, Site, eventually
from tests.processes import wait_until


async def test_a_manager_renews_its_claim_on_a_long_batch(site: Site) -> None:
    reclaim_idle_s = 0.6
    worker = await site.add_worker()
    worker.hold()
    job = site.submit("slow one")
    holder = await site.start_manager("manager-a", reclaim_idle_s=reclaim_idle_s)
    await worker.wait_for_batches(1)
    taken_at = time.monotonic()

    other = await site.start_manager("manager-b", reclaim_idle_s=reclaim_idle_s)
    reclaims = 0
    reclaim = other.queue.reclaim

    async def counted_reclaim(model: str, min_idle_ms: int, count: int = 512) -> list[Delivery]:
        nonlocal reclaims
        reclaims += 1
        return await reclaim(model, min_idle_ms, count)

    other.queue.reclaim = counted_reclaim  # type: ignore[method-assign]

    # Long enough for the entry to have gone idle several times over, had its claim not been renewed,
    # and for the other manager to have looked for idle entries again and again meanwhile.
    while time.monotonic() - taken_at < 3 * reclaim_idle_s or reclaims < 5:
        assert time.monotonic() - taken_at < WAIT_S, f"the other manager looked only {reclaims} times"
        [entry] = await site.pending()
        assert entry["consumer"] == "manager-a"
        assert entry["time_since_delivered"] < reclaim_idle_s * 1000  # renewed: never idle for long
        assert entry["times_delivered"] == 1
        await asyncio.sleep(0.05)
    assert other.dispatcher.backlog == 0
    assert worker.batches == [["slow one"]]

    worker.release()
    [final] = await site.wait_final([job])
    assert final["status"] == "COMPLETED"
    assert (final["runs"], final["manager"]) == ("1", "manager-a")
    assert worker.batches == [["slow one"]]
    assert await site.pending() == []
    await holder.stop()


async def test_the_jobs_of_a_dead_manager_are_taken_over_and_run_once(site: Site) -> None:
    dead = JobQueue(site.redis, "manager-dead", JOB_TTL_S)
    await dead.ensure_group(site.model)
    jobs = [site.submit(f"prompt {i}") for i in range(3)]
    assert len(await dead.read(site.model, count=10, block_ms=100)) == 3  # read, then never acked
    assert {e["consumer"] for e in await site.pending()} == {"manager-dead"}
    worker = await site.add_worker()

    await site.start_manager("manager-live", reclaim_idle_s=0.3)
    hashes = await site.wait_final(jobs)

    assert [h["status"] for h in hashes] == ["COMPLETED"] * 3
    assert {(h["runs"], h["manager"]) for h in hashes} == {("1", "manager-live")}
    assert sorted(worker.prompts) == sorted(j.prompt for j in jobs)  # each ran once
    assert [await site.done_signals(j) for j in jobs] == [1, 1, 1]
    assert await site.pending() == []
    assert await site.stream_length() == 0


async def test_a_job_whose_managers_keep_dying_is_given_up(site: Site) -> None:
    dead = JobQueue(site.redis, "manager-dead", JOB_TTL_S)
    await dead.ensure_group(site.model)
    job = site.submit("fatal")
    await dead.read(site.model, count=10, block_ms=100)
    worker = await site.add_worker()

    await site.start_manager("manager-live", max_attempts=1, reclaim_idle_s=0.3)
    [final] = await site.wait_final([job])

    assert (final["status"], final["error_code"]) == ("FAILED", MAX_ATTEMPTS_EXCEEDED)
    assert "its manager stopped while it ran" in final["error_message"]
    assert [d["id"] for d in await site.dead_letters()] == [job.id]
    assert worker.batches == []
    assert await site.pending() == []


async def test_drain_finishes_the_batch_in_flight(site: Site) -> None:
    worker = await site.add_worker()
    worker.hold()
    jobs = [site.submit(f"prompt {i}") for i in range(2)]
    manager = await site.start_manager()
    await worker.wait_for_batches(1)

    await manager.dispatcher.stop_intake()
    draining = asyncio.create_task(manager.dispatcher.drain(timeout_s=WAIT_S))
    await asyncio.sleep(0)
    worker.release()
    await draining

    hashes = [await site.job(j) for j in jobs]
    assert [h["status"] for h in hashes] == ["COMPLETED"] * 2
    assert [h["runs"] for h in hashes] == ["1", "1"]
    assert await site.pending() == []
    assert await site.stream_length() == 0
    assert worker.batches == [["prompt 0", "prompt 1"]]
    assert worker.cancelled == 0
    await manager.stop()


async def test_drain_hands_back_what_it_could_not_run(site: Site) -> None:
    reclaim_idle_s = 2.0
    worker = await site.add_worker(max_batch=2)
    worker.hold()
    jobs = [site.submit(f"prompt {i}") for i in range(4)]
    leaving = await site.start_manager("manager-a", reclaim_idle_s=reclaim_idle_s, max_inflight=1)
    await worker.wait_for_batches(1)  # two jobs running on the held worker, two waiting for a slot
    await eventually(lambda: leaving.dispatcher.backlog == 2, "the manager to hold the two that wait")

    await leaving.stop(drain_s=0.2)  # the worker never answers within it

    assert worker.cancelled == 1  # the held call was cancelled, not left running
    handed_back = await site.pending()
    assert sorted(e["message_id"] for e in handed_back) == sorted(await _entry_ids(site))
    assert len(handed_back) == 4
    assert {e["consumer"] for e in handed_back} == {"manager-a"}
    # Idle far past any manager's reclaim_idle_s: whoever looks next takes them over at once.
    assert min(e["time_since_delivered"] for e in handed_back) >= reclaim_idle_s * 1000 * RELEASE_IDLE_FACTOR
    assert {h["status"] for h in [await site.job(j) for j in jobs]} <= {"QUEUED", "RUNNING"}

    worker.release()
    await site.start_manager("manager-b", reclaim_idle_s=reclaim_idle_s)
    hashes = await site.wait_final(jobs)

    assert [h["status"] for h in hashes] == ["COMPLETED"] * 4
    assert {h["manager"] for h in hashes} == {"manager-b"}
    assert sorted(worker.prompts) == sorted([*(j.prompt for j in jobs), "prompt 0", "prompt 1"])
    assert await site.pending() == []


async def _entry_ids(site: Site) -> list[str]:
    return [entry_id for entry_id, _ in await site.redis.xrange(stream_key(site.model))]


async def test_jobs_delivered_to_the_read_that_stop_intake_cut_short_are_handed_back(
    site: Site, sync_redis: SyncRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The read stays blocked past the test's wait: the test holds the event loop from seeing it blocked
    # to the job's delivery, so a read whose 1 s ran out in between (a loaded machine) is never re-issued.
    monkeypatch.setattr(dispatcher, "READ_BLOCK_MS", 60_000)
    reclaim_idle_s = 2.0
    manager = await site.start_manager("manager-a", reclaim_idle_s=reclaim_idle_s)
    await eventually(lambda: _reader_blocked(site), "the read loop blocked in XREADGROUP")

    # Without yielding to the event loop (the front door is another process): a job arrives, Redis
    # hands it to the blocked read, and shutdown begins before the manager has read Redis's reply.
    job = site.submit("arrives as the manager stops")
    key = stream_key(site.model)
    wait_until(lambda: sync_redis.xpending(key, CONSUMER_GROUP)["pending"] == 1, WAIT_S, "delivery")
    await manager.stop(drain_s=1.0)

    assert (await site.job(job))["status"] == "QUEUED"
    [entry] = await site.pending()
    assert entry["consumer"] == "manager-a"
    # Handed back like every other job the manager held, for the next manager to take over at once.
    assert entry["time_since_delivered"] >= reclaim_idle_s * 1000 * RELEASE_IDLE_FACTOR


async def _reader_blocked(site: Site) -> bool:
    """This site's manager is blocked in its read (not some other test's manager on the same server)."""
    clients = await site.redis.client_list()
    mine = client_name(site.model)
    return any(c["name"] == mine and c["cmd"] == "xreadgroup" and "b" in c["flags"] for c in clients)
