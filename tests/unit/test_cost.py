import pytest

from manager.cost import BatchOfOne, CostLedger, dollars, per_thousand

PRICE = 1.006


def test_measured_batches_of_one_set_t1():
    t1 = BatchOfOne()
    t1.observe(1, 0.020)
    t1.observe(64, 0.060)
    t1.observe(1, 0.030)
    assert t1.estimate() == pytest.approx(0.021)  # 0.020 moved a tenth of the way to 0.030


def test_without_a_batch_of_one_a_line_through_the_sizes_stands_in():
    t1 = BatchOfOne()
    assert t1.estimate() is None
    t1.observe(8, 0.024)
    assert t1.estimate() is None, "one size says nothing about a batch of one"
    t1.observe(16, 0.028)  # T(b) = 0.020 + 0.0005 b
    assert t1.estimate() == pytest.approx(0.0205)


def test_a_batch_needs_a_size_and_a_duration():
    with pytest.raises(ValueError, match="size"):
        BatchOfOne().observe(0, 0.1)


def test_per_thousand_is_undefined_before_a_job_completes():
    assert per_thousand(5.0, 0) is None
    assert per_thousand(1.0, 2000) == pytest.approx(0.5)
    assert dollars(3600, PRICE) == pytest.approx(PRICE)


def test_batching_is_cheaper_than_one_invocation_per_request():
    # One worker for 10 s serves 1,000 jobs in batches of 100 (70 ms each); a batch of one takes 20.5 ms.
    ledger = CostLedger(PRICE)
    ledger.observe_batch("gpu-sim", 1, 0.0205)
    for _ in range(10):
        ledger.observe_batch("gpu-sim", 100, 0.070)
        ledger.complete("gpu-sim", 100)
    ledger.add_worker_time(10.0, running_workers=1)
    batched, naive = ledger.per_thousand()
    assert batched == pytest.approx(1000 * dollars(10.0, PRICE) / 1000)
    assert naive == pytest.approx(1000 * dollars(1000 * 0.0205, PRICE) / 1000)
    assert batched is not None and naive is not None
    assert 1 - batched / naive > 0.5


def test_idle_workers_cost_money_too():
    ledger = CostLedger(PRICE)
    ledger.add_worker_time(3600.0, running_workers=2)
    assert ledger.gpu_cost_dollars == pytest.approx(2 * PRICE)
    assert ledger.per_thousand() == (None, None)


def test_jobs_done_before_t1_is_known_are_priced_when_it_is():
    ledger = CostLedger(PRICE)
    ledger.complete("tiny-gpt2", 10)
    assert ledger.naive_cost_dollars["tiny-gpt2"] == 0.0
    ledger.observe_batch("tiny-gpt2", 1, 0.5)
    assert ledger.naive_cost_dollars["tiny-gpt2"] == pytest.approx(dollars(10 * 0.5, PRICE))
    ledger.complete("tiny-gpt2", 1)
    assert ledger.naive_cost_dollars["tiny-gpt2"] == pytest.approx(dollars(11 * 0.5, PRICE))
