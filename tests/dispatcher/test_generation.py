"""Generative models, in process against a real Redis: each job goes on arrival to a worker with room
(its prompt prefix's, within a load bound of the least loaded), its text reaches the job's token stream
as it is produced, and a cancelled or failed generation ends the way a client would expect."""

from __future__ import annotations

import asyncio
import json

import pytest

from contract.jobs import CANCELLED_BY_CLIENT, Job
from contract.keys import COUNTS_KEY, job_key
from manager import generation
from manager.outcomes import MODEL_ERROR
from manager.prefix_routing import choose, prefix_key
from manager.triton import Gaps
from tests.dispatcher.harness import Site, eventually
from tests.dispatcher.workers import BatchError, transport_fault


def streamed_text(entries: list[dict[str, str]]) -> str:
    """What a reader of the token stream shows: the deltas after the last reset."""
    text = ""
    for fields in entries:
        if "reset" in fields:
            text = ""
        elif "t" in fields:
            text += fields["t"]
    return text


async def cancelled_count(site: Site) -> int:
    """Cancellations as the sampler exports them: counted once, in Redis, by whoever ended the job."""
    return int(await site.redis.hget(COUNTS_KEY, f"model|{site.model}|cancelled") or 0)  # type: ignore[misc]


async def test_jobs_go_to_the_least_loaded_worker_and_the_rest_wait_for_room(site: Site) -> None:
    a = await site.add_worker("a", generative=True, max_num_seqs=2)
    b = await site.add_worker("b", generative=True, max_num_seqs=2)
    a.hold()
    b.hold()
    manager = await site.start_manager()
    jobs = [site.submit(f"prompt {i}", max_tokens=8) for i in range(5)]

    await a.wait_for_generations(2)
    await b.wait_for_generations(2)
    await eventually(lambda: manager.dispatcher.backlog == 1, "the fifth job waits for room")
    assert (a.active, b.active) == (2, 2)
    a.release()
    b.release()
    hashes = await site.wait_final(jobs)

    assert [h["status"] for h in hashes] == ["COMPLETED"] * 5
    assert len(a.started) + len(b.started) == 5
    for job, fields in zip(jobs, hashes, strict=True):
        result = json.loads(fields["result"])
        assert result["text"].endswith(f":{job.prompt}")
        assert result["finish_reason"] == "stop"
        entries = await site.token_entries(job)
        assert streamed_text(entries) == result["text"]
        assert entries[-1]["end"] == "COMPLETED"
        assert entries[-1]["completion_tokens"] == str(result["usage"]["completion_tokens"])


async def test_text_reaches_the_token_stream_while_the_job_runs(site: Site) -> None:
    worker = await site.add_worker(generative=True)
    worker.step_s = 0.05
    await site.start_manager()
    job = site.submit("one two three four five six seven eight", max_tokens=5)

    async def some_text_while_running() -> bool:
        fields = await site.job(job)
        return fields.get("status") == "RUNNING" and streamed_text(await site.token_entries(job)) != ""

    await eventually(some_text_while_running, "text in the token stream before the job ends")
    [fields] = await site.wait_final([job])
    assert json.loads(fields["result"])["finish_reason"] == "length"
    assert len(await site.token_entries(job)) > 2  # several deltas, then the end


async def test_a_cancelled_generation_stops_on_the_worker_and_ends_cancelled(site: Site) -> None:
    worker = await site.add_worker(generative=True)
    worker.hold()
    manager = await site.start_manager()
    before = await cancelled_count(site)
    job = site.submit("a long answer", max_tokens=8)
    await worker.wait_for_generations(1)

    await manager.dispatcher.cancel(job.id, "the client stopped reading the stream")
    [fields] = await site.wait_final([job])

    assert fields["status"] == "CANCELLED"
    assert fields["error_message"] == "the client stopped reading the stream"
    assert worker.cancelled == 1 and worker.active == 0
    assert (await site.token_entries(job))[-1]["end"] == "CANCELLED"
    assert await cancelled_count(site) == before + 1
    assert await site.pending() == []


async def test_a_running_generation_cancelled_through_the_api_ends_with_its_clients_reason(
    site: Site,
) -> None:
    worker = await site.add_worker(generative=True)
    worker.hold()
    manager = await site.start_manager()
    job = site.submit("a long answer", max_tokens=8)
    await worker.wait_for_generations(1)

    # What POST /jobs/{id}/cancel leaves: the reason in the hash; the announcement names the job alone.
    await site.redis.hset(job_key(job.id), "cancel_requested", CANCELLED_BY_CLIENT)  # type: ignore[misc]
    await manager.dispatcher.cancel(job.id)
    [fields] = await site.wait_final([job])

    assert (fields["status"], fields["error_message"]) == ("CANCELLED", CANCELLED_BY_CLIENT)
    assert worker.cancelled == 1


async def test_a_waiting_job_that_is_cancelled_never_runs(site: Site) -> None:
    worker = await site.add_worker(generative=True, max_num_seqs=1)
    worker.hold()
    manager = await site.start_manager()
    first, second = site.submit("first"), site.submit("second")
    await worker.wait_for_generations(1)
    await eventually(lambda: manager.dispatcher.backlog == 1, "the second job waits")

    await manager.dispatcher.cancel(second.id)
    worker.release()
    hashes = await site.wait_final([first, second])

    assert [h["status"] for h in hashes] == ["COMPLETED", "CANCELLED"]
    assert worker.started == ["first"]


async def test_a_job_cancelled_before_it_starts_is_not_run(site: Site) -> None:
    worker = await site.add_worker(generative=True)
    job = site.submit("never")
    await site.redis.hset(job_key(job.id), "cancel_requested", "the client went away")  # type: ignore[misc]
    await site.start_manager()

    [fields] = await site.wait_final([job])

    assert fields["status"] == "CANCELLED"
    assert worker.started == []


async def test_a_worker_fault_mid_generation_restarts_it_elsewhere_and_readers_are_told(site: Site) -> None:
    broken = await site.add_worker("a", generative=True, max_num_seqs=1)
    healthy = await site.add_worker("b", generative=True, max_num_seqs=1)
    broken.fail_next(transport_fault)
    await site.start_manager()
    # a prompt whose prefix the manager routes to the broken worker first
    prompt = next(
        p for p in (f"one two three {n}" for n in range(100))
        if choose([broken.id, healthy.id], lambda _: 0, 1, prefix_key(p)) == broken.id
    )  # fmt: skip
    jobs: list[Job] = [site.submit(prompt, max_tokens=8)]

    [fields] = await site.wait_final(jobs)

    assert fields["status"] == "COMPLETED"
    result = json.loads(fields["result"])
    assert result["text"].startswith(healthy.id)
    entries = await site.token_entries(jobs[0])
    assert any("reset" in e for e in entries)
    assert streamed_text(entries) == result["text"]


async def test_a_request_the_engine_refuses_fails_at_once_with_its_reason(site: Site) -> None:
    worker = await site.add_worker(generative=True)
    refusal = "invalid request: max_tokens 300 plus the prompt's 3 tokens is over the model's context"
    worker.fail_next(lambda: BatchError(refusal, worker_fault=False))
    await site.start_manager()
    job = site.submit("too long", max_tokens=300)

    [fields] = await site.wait_final([job])

    assert fields["status"] == "FAILED"
    assert fields["error_code"] == MODEL_ERROR
    assert fields["error_message"] == refusal
    assert worker.started == ["too long"]  # not retried: the same request gets the same answer


async def test_drain_lets_running_generations_finish_and_starts_no_new_one(site: Site) -> None:
    worker = await site.add_worker(generative=True, max_num_seqs=1)
    worker.hold()
    leaving = await site.start_manager("manager-a")
    first, second = site.submit("first"), site.submit("second")
    await worker.wait_for_generations(1)
    await eventually(lambda: leaving.dispatcher.backlog == 1, "the second job waits for room")

    stopping = asyncio.create_task(leaving.stop(drain_s=5.0))
    await asyncio.sleep(0.2)
    worker.release()  # the running generation ends within the drain
    await stopping

    assert worker.started == ["first"]  # the waiting job was not started by a manager on its way out
    assert (await site.job(first))["status"] == "COMPLETED"
    assert (await site.job(second))["status"] == "QUEUED"
    assert [e["consumer"] for e in await site.pending()] == ["manager-a"]  # handed back, for another

    await site.start_manager("manager-b", reclaim_idle_s=0.5)
    [fields] = await site.wait_final([second])
    assert fields["status"] == "COMPLETED" and fields["manager"] == "manager-b"


@pytest.mark.parametrize(("first_gap_s", "attempts"), [(5.0, 1), (0.2, 2)], ids=["allowed", "a-hang"])
async def test_a_prompt_that_waits_in_the_engine_for_its_first_token_is_a_hang_only_past_the_first_gap(
    site: Site, monkeypatch: pytest.MonkeyPatch, first_gap_s: float, attempts: int
) -> None:
    # a prompt queued behind others' prefills gets no response for a while; between tokens it would be one
    monkeypatch.setattr(generation, "GAPS", Gaps(first=first_gap_s, between=0.2))
    workers = [await site.add_worker(name, generative=True) for name in ("a", "b")]
    for worker in workers:
        worker.hold()
    await site.start_manager()
    job = site.submit("slow to start", max_tokens=3)
    await eventually(lambda: sum(len(w.started) for w in workers) == 1, "the job to start")
    first, other = sorted(workers, key=lambda w: -len(w.started))
    other.release()  # where a hang's job goes next
    await asyncio.sleep(0.6)  # three gaps between tokens
    first.release()

    [fields] = await site.wait_final([job])

    assert fields["status"] == "COMPLETED"
    assert sum(len(w.started) for w in workers) == attempts  # a hang's job ran again on the other worker
