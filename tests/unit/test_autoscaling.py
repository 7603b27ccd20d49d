import pytest

from manager.autoscaler import local_engine_workers
from manager.autoscaling import Autoscaler, LoadSnapshot, ScalingLimits

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
