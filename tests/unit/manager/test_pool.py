"""The worker-pool rules the manager's fleet and the simulator share: worker choice, expected free
time, busy time, throughput, and what happens to the jobs of a failed batch."""

import pytest

from manager.busy import BusyClock
from manager.pool import BatchTimer, RetryRule, WorkerPool


def pool(max_inflight: int = 2) -> WorkerPool:
    return WorkerPool(max_inflight, BusyClock())


def test_the_next_batch_goes_to_the_worker_with_fewest_batches_in_flight():
    workers = pool()
    workers.acquire("a", now=0.0, expected_s=0.1)
    assert workers.pick(["a", "b"]) == "b"
    workers.acquire("b", now=0.0, expected_s=0.1)
    assert workers.pick(["a", "b"]) == "a", "among equals, the first candidate"


def test_a_worker_at_its_in_flight_limit_gets_nothing_more():
    workers = pool(max_inflight=2)
    for _ in range(2):
        workers.acquire("a", now=0.0, expected_s=0.1)
    assert workers.pick(["a"]) is None
    assert not workers.has_idle(["a"])
    workers.release("a", now=0.1, sent_at=0.0)
    assert workers.pick(["a"]) == "a"


def test_a_second_batch_is_expected_to_finish_after_the_first():
    workers = pool(max_inflight=3)
    workers.acquire("a", now=10.0, expected_s=0.1)
    assert workers.busy_until(["a"]) == pytest.approx(10.1)
    workers.acquire("a", now=10.02, expected_s=0.1)
    assert workers.busy_until(["a"]) == pytest.approx(10.2), "queued behind the first on the worker"


def test_the_expected_free_time_follows_the_worker_s_real_pace():
    workers = pool(max_inflight=3)
    workers.acquire("a", now=0.0, expected_s=0.03)
    workers.acquire("a", now=0.001, expected_s=0.03)
    assert workers.busy_until(["a"]) == pytest.approx(0.06)
    workers.release("a", now=0.05, sent_at=0.0)  # the first ran long: the second starts only now
    assert workers.busy_until(["a"]) == pytest.approx(0.08), "from the real finish, not the old estimate"


def test_an_unknown_batch_time_makes_the_free_time_unknown():
    workers = pool()
    workers.acquire("a", now=10.0, expected_s=None)
    assert workers.busy_until(["a"]) is None
    workers.release("a", now=10.5, sent_at=10.0)
    workers.acquire("a", now=11.0, expected_s=0.2)
    assert workers.busy_until(["a"]) == pytest.approx(11.2)


def test_busy_time_runs_from_the_first_batch_sent_to_the_last_one_back():
    workers = pool()
    workers.acquire("a", now=1.0, expected_s=0.5)
    workers.acquire("a", now=1.2, expected_s=0.5)
    workers.release("a", now=1.6, sent_at=1.0)
    workers.release("a", now=2.0, sent_at=1.2)
    assert workers.busy_seconds(now=5.0) == pytest.approx(1.0)


def test_throughput_is_unknown_before_any_batch_ran():
    assert pool().throughput(now=100.0) == 0.0


def test_the_last_measured_throughput_outlives_a_pool_scaled_to_zero():
    workers = pool()
    workers.acquire("a", now=0.0, expected_s=2.0)
    workers.release("a", now=2.0, sent_at=0.0, jobs_done=500)  # 500 jobs in 2 busy seconds
    assert workers.throughput(now=3.0) == pytest.approx(250.0)
    workers.track([], now=10.0)  # the pool scaled to zero
    assert workers.busy_seconds(now=10.0) == 0.0
    assert workers.throughput(now=10.0) == pytest.approx(250.0), "a burst after zero is sized from it"


def test_a_worker_that_left_is_kept_until_its_batch_returns():
    workers = pool()
    workers.acquire("a", now=0.0, expected_s=1.0)
    workers.track([], now=0.5)
    workers.release("a", now=1.0, sent_at=0.0, jobs_done=10)
    assert workers.throughput(now=1.0) == pytest.approx(10.0)


def test_a_batch_queued_behind_another_is_timed_from_when_that_one_came_back():
    workers = pool()
    workers.acquire("a", now=0.0, expected_s=None)
    workers.acquire("a", now=0.01, expected_s=None)  # waits on the worker behind the first
    assert workers.release("a", now=0.03, sent_at=0.0) == pytest.approx(0.03)
    assert workers.release("a", now=0.06, sent_at=0.01) == pytest.approx(0.03), "its own 30 ms, not 50"
    workers.acquire("a", now=1.0, expected_s=None)
    assert workers.release("a", now=1.02, sent_at=1.0) == pytest.approx(0.02), "sent to an idle worker"


def test_the_batch_timer_follows_measurements_by_a_fifth():
    timer = BatchTimer()
    assert timer.seconds is None
    timer.observe(0.1)
    timer.observe(0.2)
    assert timer.seconds == pytest.approx(0.12)


def test_a_model_error_sends_each_job_of_the_batch_alone():
    plan = RetryRule(max_attempts=3).after_failure([1, 1, 1], worker_fault=False)
    assert (plan.retry, plan.give_up, plan.alone) == ((0, 1, 2), (), True)


def test_a_worker_fault_sends_the_batch_elsewhere_as_it_was():
    plan = RetryRule(max_attempts=3).after_failure([1, 2], worker_fault=True)
    assert (plan.retry, plan.alone) == ((0, 1), False)


def test_a_job_out_of_attempts_is_given_up():
    plan = RetryRule(max_attempts=3).after_failure([3, 1], worker_fault=False)
    assert (plan.give_up, plan.retry) == ((0,), (1,))
