import pytest

from contract.prices import (
    AUTHORIZER_BILLED_MS,
    AUTHORIZER_MEMORY_MB,
    CACHE_ECPUS_PER_JOB,
    CACHE_ECPUS_PER_REQUEST,
    Prices,
    billed_ms,
)
from contract.settings import Settings
from manager.busy import BusyClock
from manager.cost import (
    NAIVE_PARTS,
    PARTS,
    BatchOfOne,
    CostLedger,
    CounterReading,
    dollars,
    per_thousand,
    prices_of,
)
from manager.metrics import FrontDoorUsage, snapshot

PRICE = 1.006
PRICES = Prices()


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


def test_lambda_bills_whole_milliseconds_rounded_up():
    assert billed_ms(0.0201) == 21
    assert billed_ms(0.020) == 20
    assert billed_ms(0.0) == 0


def served(ledger: CostLedger, *, jobs: int, requests_per_job: int, ms_per_request: int) -> None:
    """The front door's hash as the sampler reads it: a first reading (the baseline), then the run's."""
    ledger.read_front_door(0, 0)
    ledger.read_submitted(0)
    ledger.read_front_door(jobs * requests_per_job, jobs * requests_per_job * ms_per_request)
    ledger.read_submitted(jobs)


def test_doubling_the_polls_per_job_adds_exactly_what_those_polls_cost():
    one_poll, two_polls = CostLedger(PRICE), CostLedger(PRICE)
    served(one_poll, jobs=1000, requests_per_job=2, ms_per_request=15)  # a submit and one poll
    served(two_polls, jobs=1000, requests_per_job=4, ms_per_request=15)  # a submit and three polls
    polls = 2000
    assert two_polls.cost_dollars["api_gateway"] - one_poll.cost_dollars["api_gateway"] == pytest.approx(
        polls * 3.50 / 1e6
    )
    front_door_gb_s = polls * 0.015 * 512 / 1024
    authorizer_gb_s = polls * AUTHORIZER_BILLED_MS / 1000 * AUTHORIZER_MEMORY_MB / 1024
    lambda_delta = 2 * polls * 0.20 / 1e6 + (front_door_gb_s + authorizer_gb_s) * 0.0000166667
    assert two_polls.cost_dollars["lambda"] - one_poll.cost_dollars["lambda"] == pytest.approx(lambda_delta)
    ecpu_delta = polls * CACHE_ECPUS_PER_REQUEST * 0.00227 / 1e6
    assert two_polls.cost_dollars["cache"] - one_poll.cost_dollars["cache"] == pytest.approx(ecpu_delta)


def test_two_requests_per_job_cost_more_than_a_full_batch_of_gpu_time():
    """The issue's arithmetic: at REST's price, a submit and one poll outweigh gpu-sim's batched GPU time."""
    ledger = CostLedger(PRICE)
    served(ledger, jobs=1000, requests_per_job=2, ms_per_request=1)
    ledger.add_worker_time(1.0, running_workers=1)  # 1,000 jobs/s through one full worker: 10 batches
    ledger.complete("gpu-sim", 1000)
    assert ledger.cost_dollars["api_gateway"] / ledger.cost_dollars["gpu"] == pytest.approx(
        2000 * 3.50 / 1e6 / dollars(1.0, PRICE)
    )
    assert ledger.cost_dollars["api_gateway"] > 10 * ledger.cost_dollars["gpu"]


def test_idle_resources_spread_over_more_jobs_cost_less_per_job():
    quiet, busy = CostLedger(PRICE), CostLedger(PRICE)
    for ledger, jobs in ((quiet, 100), (busy, 10_000)):
        ledger.add_uptime(3600.0)
        ledger.complete("gpu-sim", jobs)
    idle_per_hour = PRICES.manager_per_hour + PRICES.cache_per_hour + PRICES.other_idle_per_month / 730
    assert sum(quiet.cost_dollars.values()) == pytest.approx(idle_per_hour)
    quiet_1000, _ = quiet.per_thousand()
    busy_1000, _ = busy.per_thousand()
    assert quiet_1000 == pytest.approx(1000 * idle_per_hour / 100)
    assert busy_1000 == pytest.approx(quiet_1000 / 100)


def test_cost_per_thousand_is_the_sum_of_its_parts():
    ledger = CostLedger(PRICE)
    served(ledger, jobs=500, requests_per_job=3, ms_per_request=40)
    ledger.add_worker_time(60.0, running_workers=2)
    ledger.add_uptime(60.0)
    ledger.complete("gpu-sim", 500)
    total, _ = ledger.per_thousand()
    assert set(ledger.cost_dollars) == set(PARTS)
    assert all(ledger.cost_dollars[part] > 0 for part in PARTS)
    assert total == pytest.approx(1000 * sum(ledger.cost_dollars[part] for part in PARTS) / 500)


def test_front_door_counts_from_before_the_manager_started_are_not_its_to_price():
    ledger = CostLedger(PRICE)
    ledger.read_front_door(1_000_000, 5_000_000)
    ledger.read_submitted(400_000)
    assert ledger.cost_dollars["api_gateway"] == 0.0
    ledger.read_front_door(1_000_010, 5_000_100)
    assert ledger.cost_dollars["api_gateway"] == pytest.approx(PRICES.api_gateway(10))


def test_a_counter_that_went_down_was_reset_and_its_new_value_is_all_new():
    reading = CounterReading()
    assert reading.increase(50) == 0.0
    assert reading.increase(80) == 30
    assert reading.increase(7) == 7


def test_the_naive_baseline_pays_one_request_and_one_invocation_held_for_t1_per_job():
    ledger = CostLedger(PRICE)
    ledger.observe_batch("gpu-sim", 1, 0.1002)  # billed as 101 ms
    ledger.complete("gpu-sim", 1000)
    gpu = dollars(1000 * 0.1002, PRICE)
    gateway = 1000 * 3.50 / 1e6
    front_door_gb_s = 1000 * 0.101 * 512 / 1024
    authorizer_gb_s = 1000 * AUTHORIZER_BILLED_MS / 1000 * AUTHORIZER_MEMORY_MB / 1024
    lambdas = 2 * 1000 * 0.20 / 1e6 + (front_door_gb_s + authorizer_gb_s) * 0.0000166667
    assert set(ledger.naive_dollars) == set(NAIVE_PARTS)
    assert ledger.naive_dollars["gpu"] == pytest.approx(gpu)
    assert ledger.naive_dollars["api_gateway"] == pytest.approx(gateway)
    assert ledger.naive_dollars["lambda"] == pytest.approx(lambdas)
    _, naive = ledger.per_thousand()
    assert naive == pytest.approx(gpu + gateway + lambdas)  # 1,000 jobs: the totals are per 1,000


def test_batching_is_cheaper_than_one_invocation_per_request_on_gpu_time():
    # One worker for 10 s serves 1,000 jobs in batches of 100 (70 ms each); a batch of one takes 20.5 ms.
    ledger = CostLedger(PRICE)
    ledger.observe_batch("gpu-sim", 1, 0.0205)
    for _ in range(10):
        ledger.observe_batch("gpu-sim", 100, 0.070)
        ledger.complete("gpu-sim", 100)
    ledger.add_worker_time(10.0, running_workers=1)
    assert ledger.cost_dollars["gpu"] == pytest.approx(dollars(10.0, PRICE))
    assert ledger.naive_dollars["gpu"] == pytest.approx(dollars(1000 * 0.0205, PRICE))
    assert 1 - ledger.cost_dollars["gpu"] / ledger.naive_dollars["gpu"] > 0.5


def test_idle_workers_cost_money_too():
    ledger = CostLedger(PRICE)
    ledger.add_worker_time(3600.0, running_workers=2)
    assert ledger.gpu_cost_dollars == pytest.approx(2 * PRICE)
    assert ledger.per_thousand() == (None, None)


def test_jobs_done_before_t1_is_known_are_priced_when_it_is():
    ledger = CostLedger(PRICE)
    ledger.complete("tiny-gpt2", 10)
    assert ledger.naive_cost_dollars["tiny-gpt2"] == 0.0
    assert ledger.naive_dollars["api_gateway"] == 0.0, "a job is priced whole, once T1 is known"
    ledger.observe_batch("tiny-gpt2", 1, 0.5)
    assert ledger.naive_cost_dollars["tiny-gpt2"] == pytest.approx(dollars(10 * 0.5, PRICE))
    ledger.complete("tiny-gpt2", 1)
    assert ledger.naive_cost_dollars["tiny-gpt2"] == pytest.approx(dollars(11 * 0.5, PRICE))
    assert ledger.naive_dollars["api_gateway"] == pytest.approx(PRICES.api_gateway(11))


def test_an_embedding_job_counts_an_inference_per_text_and_naively_one_request():
    ledger = CostLedger(PRICE)
    ledger.observe_batch("minilm", 1, 0.004)
    ledger.complete("minilm", jobs=2, inferences=1000)  # two requests of 500 texts each
    assert ledger.completed["minilm"] == 1000
    assert ledger.naive_cost_dollars["minilm"] == pytest.approx(dollars(1000 * 0.004, PRICE))
    assert ledger.naive_dollars["api_gateway"] == pytest.approx(PRICES.api_gateway(2))
    assert ledger.naive_dollars["lambda"] == pytest.approx(PRICES.lambdas(2, 2 * billed_ms(500 * 0.004)))


def test_a_deployment_sets_its_own_prices():
    settings = Settings.from_env(
        {
            "SYNAPSE_API_GATEWAY_PRICE_PER_MILLION_REQUESTS": "1.00",  # an HTTP API instead of REST
            "SYNAPSE_FRONT_DOOR_MEMORY_MB": "1024",
            "SYNAPSE_IDLE_OTHER_PRICE_PER_MONTH": "0",
        }
    )
    prices = prices_of(settings)
    assert prices.api_gateway(1_000_000) == pytest.approx(1.00)
    assert prices.other_idle(3600.0) == 0.0
    one_second = prices.lambdas(1, 1000) - prices.lambdas(1, 0)
    assert one_second == pytest.approx(1.0 * 0.0000166667), "1,024 MB for one second is one GB-second"
    ledger = CostLedger(settings.gpu_price_per_hour, prices)
    ledger.read_submitted(0)
    ledger.read_submitted(1_000_000)
    assert ledger.cost_dollars["cache"] == pytest.approx(CACHE_ECPUS_PER_JOB * 0.00227)


def test_every_part_is_exported_even_before_it_costs_anything():
    ledger = CostLedger(PRICE)
    ledger.add_uptime(60.0)
    usage = FrontDoorUsage({"submit": 3, "result": 9}, {"submit": 0.045, "result": 1.2})
    current = snapshot({}, {}, BusyClock(), ledger, 0.0, usage=usage)
    assert set(current.cost_dollars) == set(PARTS)
    assert current.cost_dollars["gpu"] == 0.0
    assert current.cost_dollars["manager"] == pytest.approx(PRICES.manager(60.0))
    assert set(current.naive_dollars) == set(NAIVE_PARTS)
    assert current.frontdoor_requests == {"submit": 3, "result": 9}
    assert "batched" not in current.cost_per_thousand, "no completed job: no cost per 1,000"
