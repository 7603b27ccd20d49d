"""A job cancelled after a manager read it, whose announcement that manager missed, never reaches a worker:
the manager marks a batch RUNNING before it sends it, and leaves out what has ended meanwhile."""

from __future__ import annotations

from tests.dispatcher.harness import Site, eventually


async def test_a_job_cancelled_while_its_manager_held_it_is_never_sent_to_the_worker(site: Site) -> None:
    manager = await site.start_manager()  # no worker yet: the jobs wait in the manager's buffer
    jobs = [site.submit(f"job {i}") for i in range(3)]
    await eventually(lambda: manager.dispatcher.backlog == 3, "the manager holds all three")
    record = site.store.get(jobs[1].id)
    assert record is not None
    site.store.cancel(record, "cancelled by its client")  # the harness's managers hear no announcement

    worker = await site.add_worker()
    hashes = await site.wait_final(jobs)

    assert [h["status"] for h in hashes] == ["COMPLETED", "CANCELLED", "COMPLETED"]
    assert "job 1" not in worker.prompts and {"job 0", "job 2"} <= set(worker.prompts)
