import uuid

import pytest
import redis.asyncio as aioredis

from contract.jobs import Job, Priority
from contract.keys import stream_key
from contract.settings import Settings
from contract.workers import WorkerRegistry
from manager.autoscaler import AutoscalerLoop, local_engine_workers
from manager.autoscaling import Autoscaler, LoadSnapshot, ScalingLimits
from manager.busy import BusyClock
from manager.fleet import Fleet
from manager.providers import Capacity
from manager.queue import JobQueue

LIMITS = ScalingLimits(min_workers=0, max_workers=8, latency_budget_s=0.150, scale_to_zero_after_s=300,
                       scale_down_cooldown_s=60)  # fmt: skip


def load(now: float, *, backlog: int = 0, running: int = 1, throughput: float = 1000.0, busy: float = 0.9,
         last_job_at: float | None = 0.0) -> LoadSnapshot:  # fmt: skip
    return LoadSnapshot(now=now, backlog=backlog, running=running, throughput=throughput, busy_ratio=busy,
                        last_job_at=last_job_at)  # fmt: skip


def test_the_first_job_for_an_empty_pool_asks_for_a_worker_at_once():
    decision = Autoscaler(LIMITS).decide(load(0, backlog=1, running=0, throughput=0), desired=0)
    assert decision.desired == 1


def test_a_burst_after_scale_to_zero_asks_at_once_for_the_workers_its_backlog_needs():
    # Throughput measured before the pool emptied: 900 waiting jobs need 6 workers, not one then more.
    decision = Autoscaler(LIMITS).decide(load(0, backlog=900, running=0, throughput=1000.0), desired=0)
    assert decision.desired == 6


def test_a_few_jobs_after_scale_to_zero_ask_for_one_worker():
    assert Autoscaler(LIMITS).decide(load(0, backlog=3, running=0, throughput=1000.0), desired=0).desired == 1


def test_a_backlog_that_would_wait_past_the_budget_scales_up_to_drain_it_in_time():
    # 1,000 jobs/s per worker drain 150 jobs within 150 ms: 900 waiting jobs need 6 workers.
    assert Autoscaler(LIMITS).decide(load(10, backlog=900), desired=2).desired == 6


def test_a_backlog_within_budget_keeps_the_pool():
    assert Autoscaler(LIMITS).decide(load(10, backlog=100), desired=2).desired == 2


def test_scaling_up_never_passes_max_workers():
    decision = Autoscaler(LIMITS).decide(load(10, backlog=100_000), desired=2)
    assert decision.desired == 8
    assert "bounded" in decision.reason


def test_an_idle_pool_shrinks_one_worker_per_cooldown():
    policy = Autoscaler(LIMITS)
    assert policy.decide(load(100, busy=0.1, last_job_at=99), desired=4).desired == 3
    assert policy.decide(load(130, busy=0.1, last_job_at=129), desired=3).desired == 3, "still cooling down"
    assert policy.decide(load(161, busy=0.1, last_job_at=160), desired=3).desired == 2


def test_a_busy_pool_does_not_shrink():
    assert Autoscaler(LIMITS).decide(load(100, busy=0.9, last_job_at=99), desired=4).desired == 4


def test_no_jobs_for_scale_to_zero_after_goes_to_zero():
    policy = Autoscaler(LIMITS)
    assert policy.decide(load(299, last_job_at=0, busy=0.0), desired=2).desired == 1
    assert policy.decide(load(300, last_job_at=0, busy=0.0), desired=1).desired == 0


def test_min_workers_is_kept_even_when_idle():
    limits = ScalingLimits(min_workers=2, max_workers=8, scale_to_zero_after_s=10)
    assert Autoscaler(limits).decide(load(1000, last_job_at=0, busy=0.0), desired=3).desired == 2


def test_impossible_limits_are_refused():
    with pytest.raises(ValueError, match="min_workers"):
        ScalingLimits(min_workers=5, max_workers=2)


def engines(now: float, workers: int, *, desired_busy: float = 0.9) -> LoadSnapshot:
    """A load of generative sequences only: they fill `workers` engines at their per-worker budget."""
    return LoadSnapshot(now=now, backlog=0, running=1, throughput=0.0, busy_ratio=desired_busy,
                        last_job_at=now, engine_workers=workers)  # fmt: skip


def test_waiting_and_running_sequences_ask_for_the_engines_they_fill():
    assert Autoscaler(LIMITS).decide(engines(0, 3), desired=0).desired == 3
    assert Autoscaler(LIMITS).decide(engines(0, 3), desired=1).desired == 3


def test_engines_that_share_one_machines_cores_are_not_added():
    local = ScalingLimits(max_workers=4, max_engine_workers=1)
    assert Autoscaler(local).decide(engines(0, 3), desired=0).desired == 1


def test_an_idle_pool_does_not_shrink_below_what_running_sequences_fill():
    scaler = Autoscaler(LIMITS)
    assert scaler.decide(engines(1000, 2, desired_busy=0.1), desired=2).desired == 2


def test_one_engine_per_four_cores_on_one_machine():
    assert [local_engine_workers(cores) for cores in (1, 2, 4, 16)] == [1, 1, 1, 4]


def test_a_wake_at_zero_asks_for_a_worker_with_nothing_queued():
    woken = LoadSnapshot(
        now=10, backlog=0, running=0, throughput=0, busy_ratio=0, last_job_at=None, woken_at=9
    )
    decision = Autoscaler(LIMITS).decide(woken, desired=0)
    assert decision.desired == 1
    assert "woke" in decision.reason


def test_a_wake_holds_the_pool_as_a_job_seen_at_its_time_would_and_no_longer():
    policy = Autoscaler(LIMITS)

    def woken(now: float) -> LoadSnapshot:
        return LoadSnapshot(now=now, backlog=0, running=1, throughput=0, busy_ratio=0, last_job_at=None,
                            woken_at=0)  # fmt: skip

    assert policy.decide(woken(299), desired=1).desired == 1
    assert policy.decide(woken(300), desired=1).desired == 0
    assert policy.decide(woken(301), desired=0).desired == 0, "a spent wake does not start the pool again"


def batch_load(now: float, batch: int, due_s: float | None, *, backlog: int = 0, busy: float = 0.9,
               throughput: float = 1000.0, last_job_at: float | None = None) -> LoadSnapshot:  # fmt: skip
    """A load with `batch` batch jobs not yet ended, the earliest due in `due_s` (LIMITS' margin: 60 s)."""
    return LoadSnapshot(now=now, backlog=backlog, running=1, throughput=throughput, busy_ratio=busy,
                        last_job_at=now if last_job_at is None else last_job_at, batch_backlog=batch,
                        batch_due_s=due_s)  # fmt: skip


def test_a_batch_backlog_that_fits_before_its_deadline_does_not_grow_the_pool():
    # 100,000 jobs at 1,000 jobs/s per worker: one worker finishes them in 100 s, and 840 s are left.
    assert Autoscaler(LIMITS).decide(batch_load(10, 100_000, due_s=900), desired=1).desired == 1
    # The same jobs as interactive ones would want every worker, to drain within the latency budget.
    assert Autoscaler(LIMITS).decide(load(10, backlog=100_000), desired=1).desired == 8


def test_a_batch_backlog_asks_for_the_workers_that_finish_it_by_the_earliest_deadline():
    # 500,000 jobs, 160 s to the deadline less 60 s for a new worker to start: 100 s at 1,000 jobs/s each.
    decision = Autoscaler(LIMITS).decide(batch_load(10, 500_000, due_s=160), desired=1)
    assert decision.desired == 5
    assert "by its deadline" in decision.reason


def test_the_pool_is_the_larger_of_what_interactive_and_batch_jobs_ask_for():
    # Interactive: 900 jobs within 150 ms need 6 workers; batch: 300,000 jobs in 100 s need 3.
    assert Autoscaler(LIMITS).decide(batch_load(10, 300_000, due_s=160, backlog=900), desired=1).desired == 6
    assert Autoscaler(LIMITS).decide(batch_load(10, 300_000, due_s=160, backlog=100), desired=1).desired == 3


def test_batch_jobs_alone_start_an_empty_pool():
    decision = Autoscaler(LIMITS).decide(batch_load(0, 10, due_s=900, throughput=0.0, busy=0.0), desired=0)
    assert decision.desired == 1
    assert "scale from zero" in decision.reason


def test_a_deadline_inside_the_margin_or_past_asks_for_nothing():
    """A worker started now would serve after it: a short deadline must not size the whole backlog."""
    assert Autoscaler(LIMITS).decide(batch_load(10, 2_000, due_s=30), desired=1).desired == 1
    assert Autoscaler(LIMITS).decide(batch_load(10, 2_000, due_s=-5), desired=1).desired == 1
    assert Autoscaler(LIMITS).decide(batch_load(10, 200_000, due_s=160), desired=1).desired == 2


def test_an_idle_pool_does_not_shrink_below_what_its_batch_backlog_needs_nor_go_to_zero():
    policy = Autoscaler(LIMITS)
    assert policy.decide(batch_load(100, 300_000, due_s=160, busy=0.1), desired=4).desired == 3
    assert policy.decide(batch_load(200, 300_000, due_s=160, busy=0.1), desired=3).desired == 3
    idle_for_long = batch_load(1000, 5, due_s=500, busy=0.0, last_job_at=0)
    assert policy.decide(idle_for_long, desired=1).desired == 1


class FixedPool:
    """A provider for a loop that is only asked for snapshots."""

    async def capacity(self) -> Capacity:
        return Capacity(desired=1, running=1)

    async def set_desired(self, count: int) -> None:
        raise AssertionError("a snapshot sets nothing")

    async def aclose(self) -> None:
        return None


async def test_the_snapshot_counts_batch_jobs_from_their_stream_with_the_oldest_deadline(redis_url: str):
    """Every batch stream entry is a batch job not yet ended, whichever manager holds it; the oldest has
    the earliest deadline. Interactive jobs count as before, apart."""
    model = f"model-{uuid.uuid4().hex[:10]}"
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    settings = Settings(redis_url="redis://unused", models=(model,), max_workers=2)
    loop = AutoscalerLoop(
        client, settings, provider=FixedPool(),
        fleet=Fleet.for_triton(WorkerRegistry(client, 1.0), 1.0, 1, BusyClock()),
        local_backlog=lambda _: 0, sequences=lambda _: None, identity="test",
    )  # fmt: skip
    # The oldest batch job has ten minutes; a younger one, one minute (seen once the oldest ends).
    submitted = ((600_000, Priority.BATCH), (60_000, Priority.BATCH), (1_000, Priority.INTERACTIVE))
    jobs = [
        Job.new(model=model, prompt="p", max_tokens=1, timeout_ms=timeout, priority=priority)
        for timeout, priority in submitted
    ]
    try:
        await JobQueue(client, "manager-a", 60).ensure_group(model)
        for job in jobs:
            await client.xadd(stream_key(model, job.priority), job.stream_fields())
        load = await loop.snapshot()
    finally:
        await client.delete(stream_key(model, Priority.BATCH), stream_key(model, Priority.INTERACTIVE))
        await client.aclose()
    assert (load.backlog, load.batch_backlog) == (1, 2)
    assert load.batch_due_s == pytest.approx(600, abs=5), "the oldest entry's deadline"
    assert load.last_job_at == load.now
