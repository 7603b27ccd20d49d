"""The Lua scripts that keep Redis consistent, run against a real Redis: the front door's submit, and the
manager's mark-running and check-and-set completion."""

from __future__ import annotations

import json
from dataclasses import replace

from contract.job_store import JobStore, Written
from contract.jobs import Job, JobStatus, Outcome, Sampling
from contract.keys import CONSUMER_GROUP, dead_letter_key, done_key, job_key, stream_key
from contract.redis_client import AsyncRedis, SyncRedis
from manager.queue import Delivery, JobQueue
from tests.dispatcher.harness import JOB_TTL_S, entries


def new_job(model: str, prompt: str = "hello") -> Job:
    return Job.new(
        model=model, prompt=prompt, max_tokens=8, parameters=Sampling(temperature=0.5), timeout_ms=30_000
    )


def completed(job: Job, text: str = "answer") -> Outcome:
    return Outcome(
        job_id=job.id, status=JobStatus.COMPLETED, started_ms=job.created_ms + 5,
        completed_ms=job.created_ms + 9, batch_size=3, text=text, prompt_tokens=2, completion_tokens=4,
    )  # fmt: skip


def failed(job: Job, code: str = "max_attempts_exceeded") -> Outcome:
    return Outcome(
        job_id=job.id, status=JobStatus.FAILED, started_ms=job.created_ms, completed_ms=job.created_ms + 1,
        batch_size=0, error_code=code, error_message=f"it broke: {code}",
    )  # fmt: skip


async def read_all(queue: JobQueue, model: str) -> list[Delivery]:
    return await queue.read(model, count=100, block_ms=100)


async def pending_ids(r: AsyncRedis, model: str) -> list[str]:
    rows = await r.xpending_range(stream_key(model), CONSUMER_GROUP, min="-", max="+", count=100)
    return [row["message_id"] for row in rows]


# -- the front door's submit ---------------------------------------------------------------------


async def test_submit_writes_the_job_and_its_stream_entry_together(
    r: AsyncRedis, store: JobStore, queue: JobQueue, model: str
) -> None:
    job = new_job(model)

    assert store.submit(job) is True

    stored = await r.hgetall(job_key(job.id))  # type: ignore[misc]
    assert stored == {**job.hash_fields(), "entry": stored["entry"]}
    assert 0 < await r.ttl(job_key(job.id)) <= JOB_TTL_S
    [delivery] = await read_all(queue, model)
    assert delivery.job == job  # the entry carries the whole job: the manager reads nothing else


async def test_a_full_queue_refuses_the_job_and_writes_nothing(
    r: AsyncRedis, sync_redis: SyncRedis, queue: JobQueue, model: str
) -> None:
    store = JobStore(sync_redis, JOB_TTL_S, max_queue_length=2)
    first, second, third = (new_job(model, f"p{i}") for i in range(3))
    assert store.submit(first) and store.submit(second)

    assert store.submit(third) is False

    assert await r.exists(job_key(third.id)) == 0
    assert await r.xlen(stream_key(model)) == 2


async def test_submitting_many_in_one_round_trip_writes_each_as_one_submit_would(
    r: AsyncRedis, sync_redis: SyncRedis, model: str
) -> None:
    """The Batch API's chunks: each job written whole or refused whole, with its own refusal, and the
    ones after a refusal still tried; a script cache that Redis lost (a restart) is loaded again."""
    store = JobStore(sync_redis, JOB_TTL_S, max_queue_length=3)
    jobs = [new_job(model, f"p{i}") for i in range(5)]
    assert store.submit_many(jobs[:2]) == [Written.YES, Written.YES]
    assert store.submit_many(jobs[2:]) == [Written.YES, Written.QUEUE_FULL, Written.QUEUE_FULL]
    assert await r.xlen(stream_key(model)) == 3
    assert [await r.exists(job_key(job.id)) for job in jobs] == [1, 1, 1, 0, 0]

    tenant = f"quota-{model}"
    quota = [replace(new_job(f"{model}-q"), tenant=tenant) for _ in range(3)]
    over = JobStore(sync_redis, JOB_TTL_S, 100).submit_many(quota, max_inflight=2)
    assert over == [Written.YES, Written.YES, Written.OVER_QUOTA]

    sync_redis.script_flush()
    later = new_job(f"{model}-after-flush")
    assert JobStore(sync_redis, JOB_TTL_S, 100).submit_many([later]) == [Written.YES]
    assert await r.exists(job_key(later.id)) == 1


async def test_jobs_read_but_not_finished_still_fill_the_queue(
    r: AsyncRedis, sync_redis: SyncRedis, queue: JobQueue, model: str
) -> None:
    """A job a manager holds is still owed a result; only a finished one (acked and deleted) frees room."""
    store = JobStore(sync_redis, JOB_TTL_S, max_queue_length=2)
    first, second = new_job(model, "p0"), new_job(model, "p1")
    assert store.submit(first) and store.submit(second)
    deliveries = await read_all(queue, model)
    assert store.submit(new_job(model, "refused")) is False

    await queue.complete(model, [completed(first)], entries(deliveries[0]))

    later = new_job(model, "accepted")
    assert store.submit(later) is True
    assert (await r.hgetall(job_key(later.id)))["status"] == "QUEUED"  # type: ignore[misc]


# -- mark running --------------------------------------------------------------------------------


async def test_mark_running_counts_every_run_and_names_who_ran_it(
    r: AsyncRedis, store: JobStore, queue: JobQueue, model: str
) -> None:
    jobs = [new_job(model, f"p{i}") for i in range(2)]
    for job in jobs:
        store.submit(job)

    await queue.mark_running(jobs, 1000, "worker-1")
    await queue.mark_running(jobs[:1], 2000, "worker-2")  # the first ran again, elsewhere

    again, once = [await r.hgetall(job_key(j.id)) for j in jobs]  # type: ignore[misc]
    assert {again["status"], once["status"]} == {"RUNNING"}
    assert (again["runs"], again["started_ms"], again["worker"]) == ("2", "2000", "worker-2")
    assert (once["runs"], once["started_ms"], once["worker"]) == ("1", "1000", "worker-1")
    assert again["manager"] == once["manager"] == "manager-a"


async def test_mark_running_leaves_final_and_vanished_jobs_alone(
    r: AsyncRedis, store: JobStore, queue: JobQueue, model: str
) -> None:
    done, gave_up, expired = (new_job(model, f"p{i}") for i in range(3))
    for job in (done, gave_up):
        store.submit(job)
    [first, second] = await read_all(queue, model)
    await queue.complete(model, [completed(done), failed(gave_up)], entries(first, second))
    before = [await r.hgetall(job_key(j.id)) for j in (done, gave_up)]  # type: ignore[misc]

    await queue.mark_running([done, gave_up, expired], 5000, "worker-late")

    assert [await r.hgetall(job_key(j.id)) for j in (done, gave_up)] == before  # type: ignore[misc]
    assert await r.exists(job_key(expired.id)) == 0  # no half job written for one that expired


# -- complete ------------------------------------------------------------------------------------


async def test_complete_writes_the_outcome_wakes_readers_and_removes_the_entry(
    r: AsyncRedis, store: JobStore, queue: JobQueue, model: str
) -> None:
    job = new_job(model)
    store.submit(job)
    [delivery] = await read_all(queue, model)
    await queue.mark_running([job], job.created_ms + 5, "worker-1")

    assert await queue.complete(model, [completed(job)], entries(delivery)) == {job.id}

    fields = await r.hgetall(job_key(job.id))  # type: ignore[misc]
    assert fields["status"] == "COMPLETED"
    assert (fields["started_ms"], fields["completed_ms"]) == (
        str(job.created_ms + 5),
        str(job.created_ms + 9),
    )
    assert fields["batch_size"] == "3"
    assert json.loads(fields["result"]) == {
        "text": "answer",
        "usage": {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6},
    }
    assert fields["prompt"] == job.prompt and fields["runs"] == "1"  # the job itself is kept
    assert await r.lrange(done_key(job.id), 0, -1) == ["1"]  # type: ignore[misc]
    assert 0 < await r.ttl(done_key(job.id)) <= JOB_TTL_S
    assert await pending_ids(r, model) == []  # acknowledged
    assert await r.xlen(stream_key(model)) == 0  # and deleted: the queue's room is given back
    assert await r.xlen(dead_letter_key(model)) == 0


async def test_a_final_job_never_changes_again(
    r: AsyncRedis, store: JobStore, queue: JobQueue, model: str
) -> None:
    """Its batch ran twice (a manager was taken over while it ran): the first outcome stays."""
    job = new_job(model)
    store.submit(job)
    [delivery] = await read_all(queue, model)
    await queue.complete(model, [completed(job, "first")], entries(delivery))
    before = await r.hgetall(job_key(job.id))  # type: ignore[misc]

    written = await queue.complete(model, [failed(job)], entries(delivery), dead=frozenset({job.id}))

    assert written == set()
    assert await r.hgetall(job_key(job.id)) == before  # type: ignore[misc]
    assert await r.llen(done_key(job.id)) == 1  # type: ignore[misc]
    assert await r.xlen(dead_letter_key(model)) == 0


async def test_complete_dead_letters_only_the_jobs_it_is_told_to(
    r: AsyncRedis, store: JobStore, queue: JobQueue, model: str
) -> None:
    gave_up, late, fine = new_job(model, "a"), new_job(model, "b"), new_job(model, "c")
    for job in (gave_up, late, fine):
        store.submit(job)
    deliveries = await read_all(queue, model)
    outcomes = [failed(gave_up), failed(late, "deadline_exceeded"), completed(fine)]

    written = await queue.complete(model, outcomes, entries(*deliveries), dead=frozenset({gave_up.id}))

    assert written == {gave_up.id, late.id, fine.id}
    dead = await r.xrange(dead_letter_key(model))
    assert [fields for _id, fields in dead] == [
        {
            "id": gave_up.id,
            "error_code": "max_attempts_exceeded",
            "error_message": "it broke: max_attempts_exceeded",
        }
    ]
    assert (await r.hgetall(job_key(late.id)))["error_code"] == "deadline_exceeded"  # type: ignore[misc]
    assert await pending_ids(r, model) == []
    assert await r.xlen(stream_key(model)) == 0


async def test_complete_of_an_expired_job_writes_nothing_but_frees_its_entry(
    r: AsyncRedis, store: JobStore, queue: JobQueue, model: str
) -> None:
    job = new_job(model)
    store.submit(job)
    [delivery] = await read_all(queue, model)
    await r.delete(job_key(job.id))  # its TTL ran out while it waited

    assert await queue.complete(model, [completed(job)], entries(delivery)) == set()

    assert await r.exists(job_key(job.id), done_key(job.id)) == 0  # no half job without its fields
    assert await pending_ids(r, model) == []
    assert await r.xlen(stream_key(model)) == 0
