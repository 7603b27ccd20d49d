from dataclasses import replace

import numpy as np
import pytest

from manager.autoscaling import ScalingLimits
from planner.plan import PlanRequest, plan
from planner.simulator import (
    LatencyProfile,
    Overheads,
    SimConfig,
    Simulation,
    poisson_arrivals,
    simulate,
)

DESIGN = LatencyProfile(base_ms=100)  # a batch of up to 100 prompts takes 100 ms


def test_the_design_example_needs_about_twenty_gpus_where_naive_needs_two_thousand():
    result = plan(PlanRequest(profile=DESIGN, max_batch=100, slo_p99_s=0.500, rate=20_000, duration_s=20))
    assert result.meets_slo
    assert 15 <= result.workers <= 25
    assert result.naive_gpus == pytest.approx(2000, rel=0.02)
    assert result.cost_per_1000 < 0.05 * result.naive_cost_per_1000


def test_a_tighter_slo_never_needs_fewer_workers():
    loose = plan(PlanRequest(profile=DESIGN, max_batch=100, slo_p99_s=0.500, rate=5_000, duration_s=10))
    tight = plan(PlanRequest(profile=DESIGN, max_batch=100, slo_p99_s=0.250, rate=5_000, duration_s=10))
    assert tight.workers >= loose.workers
    assert tight.result.percentile_ms(99) <= 250


def test_without_batching_one_worker_is_an_m_d_1_queue():
    # 50 jobs/s on a server that takes 10 ms: busy = 50 * 0.010, and the Pollaczek-Khinchine mean wait
    # rho * T / (2 * (1 - rho)) = 5 ms on top of the 10 ms of service.
    arrivals = poisson_arrivals(50, 2000, seed=7)
    config = SimConfig(profile=LatencyProfile(10), max_batch=1, max_wait_s=0, max_inflight=1)
    result = simulate(config, arrivals)
    assert result.busy_ratio == pytest.approx(0.5, abs=0.02)
    assert float(np.mean(result.latencies_s)) == pytest.approx(0.015, rel=0.05)
    assert result.completed == len(arrivals)


def test_littles_law_holds_for_a_batched_pool():
    arrivals = poisson_arrivals(3000, 30, seed=3)
    config = SimConfig(profile=LatencyProfile(20, 0.5), max_batch=64, workers=3, warmup_s=0)
    result = simulate(config, arrivals)
    in_system = result.throughput * float(np.mean(result.latencies_s))
    # Jobs in the system, counted directly: sum of time each spent / the span of the run.
    span = float(arrivals[-1] - arrivals[0])
    assert in_system == pytest.approx(float(np.sum(result.latencies_s)) / span, rel=0.02)
    assert result.completed == len(arrivals)


def test_a_second_batch_in_flight_gathers_jobs_until_just_before_its_worker_frees_up():
    config = SimConfig(profile=LatencyProfile(50), max_batch=8, max_wait_s=0.020, max_inflight=2)
    # A first job, alone on the worker, gives the manager its measure of a batch's time: 50 ms.
    result = simulate(config, np.array([0.0, 1.0, 1.001, 1.030]))
    # Job 1 goes at once to the idle worker. Job 2 does not queue behind it when its 20 ms window
    # ends: the worker should be busy until 1.050, so the batch waits until 5 ms (lead_s) before that,
    # job 3 joins it, and the pair runs as soon as job 1's batch is done.
    assert result.latencies_s.tolist()[1:] == pytest.approx([0.050, 0.099, 0.070])
    assert result.batch_sizes.tolist() == [1, 1, 2]


def test_before_any_batch_time_is_measured_the_window_alone_closes_a_batch():
    config = SimConfig(profile=LatencyProfile(50), max_batch=8, max_wait_s=0.020, max_inflight=2)
    result = simulate(config, np.array([0.0, 0.001, 0.030]))
    # The manager does not know yet when the worker frees up (it knows only what it measured), so
    # job 2 goes when its window closes and queues behind job 1; job 3 finds no free slot until job
    # 1's batch returns at 50 ms, its own window closed by then, and queues behind job 2.
    assert result.latencies_s.tolist() == pytest.approx([0.050, 0.099, 0.120])
    assert result.batch_sizes.tolist() == [1, 1, 1]


def test_a_full_batch_queues_behind_the_running_one_at_once():
    config = SimConfig(profile=LatencyProfile(50), max_batch=2, max_wait_s=0.020, max_inflight=2)
    result = simulate(config, np.array([0.0, 0.001, 0.002]))
    # Job 1 runs alone; jobs 2 and 3 fill a batch, which cannot grow, so it goes to the busy worker now.
    assert result.batch_sizes.tolist() == [1, 2]
    assert result.latencies_s.tolist() == pytest.approx([0.050, 0.099, 0.098])


def test_with_one_batch_in_flight_waiting_jobs_go_together_when_the_worker_is_idle_again():
    config = SimConfig(profile=LatencyProfile(50), max_batch=8, max_wait_s=0.020, max_inflight=1)
    result = simulate(config, np.array([0.0, 0.001, 0.030]))
    assert result.latencies_s.tolist() == pytest.approx([0.050, 0.099, 0.070])
    assert result.batch_sizes.tolist() == [1, 2]


def _most_in_flight(sim: Simulation, worker: int) -> int:
    """Batches in flight at once on a worker, from the batch records (cut -> outcome held)."""
    edges = sorted(
        (t, step) for b in sim.batches if b.worker == worker for t, step in ((b.cut_at, 1), (b.done_at, -1))
    )  # at one instant a batch returns (-1) before the next is cut (+1), as the manager sees it
    return int(max(np.cumsum([step for _, step in edges]), default=0))


def test_a_worker_never_holds_more_than_max_inflight_batches():
    config = SimConfig(profile=LatencyProfile(20, 0.5), max_batch=16, max_inflight=2)
    sim = Simulation(config, poisson_arrivals(2000, 5, seed=5))  # more than one worker can serve
    result = sim.run()
    assert result.completed == len(sim.created)
    assert _most_in_flight(sim, 0) == 2


def test_a_batch_goes_to_the_worker_with_the_fewest_in_flight_the_oldest_among_equals():
    config = SimConfig(profile=LatencyProfile(50), max_batch=1, max_wait_s=0, max_inflight=2, workers=2)
    sim = Simulation(config, np.array([0.0, 0.001, 0.002, 0.060]))
    sim.run()
    # 0 and 1 are idle: the oldest, 0; then 1, idle; both hold one: 0 again. At 60 ms worker 1 is done
    # while worker 0 still runs the batch queued behind its first: worker 1.
    assert [b.worker for b in sim.batches] == [0, 1, 0, 1]
    assert max(_most_in_flight(sim, w) for w in (0, 1)) == 2


def test_a_poison_job_fails_alone_after_max_attempts_and_its_batch_mates_complete():
    config = SimConfig(profile=LatencyProfile(10, 0.1), max_batch=10, workers=2, poison_rate=0.05)
    sim = Simulation(config, np.zeros(1000))  # a burst: every first attempt is a full batch
    result = sim.run()
    poison = sim.poison
    assert 20 <= poison.sum() <= 80
    assert result.failed == poison.sum() and result.completed == len(poison) - poison.sum()
    assert sim.failed.tolist() == poison.tolist()
    assert np.isnan(sim.completed_at[poison]).all() and not np.isnan(sim.completed_at[~poison]).any()
    assert len(result.latencies_s) == result.completed
    runs = np.zeros(len(poison), dtype=int)
    for batch in sim.batches:
        runs[[*batch.retried, *range(batch.first, batch.last)]] += 1
        assert batch.size == (1 if batch.retried else 10), "a retried job runs in a batch of its own"
        assert batch.failed == bool(poison[[*batch.retried, *range(batch.first, batch.last)]].any())
    failed_mates = {j for b in sim.batches if b.failed and not b.retried for j in range(b.first, b.last)}
    assert (runs[poison] == config.max_attempts).all()
    assert all(runs[j] == 2 for j in failed_mates if not poison[j])
    assert all(runs[j] == 1 for j in range(len(poison)) if j not in failed_mates)


def test_under_poisson_load_every_job_either_completes_or_is_a_poison_job_given_up():
    config = SimConfig(profile=LatencyProfile(20, 0.5), max_batch=32, workers=2, poison_rate=0.01)
    arrivals = poisson_arrivals(1000, 10, seed=11)
    sim = Simulation(config, arrivals)
    result = sim.run()
    assert result.completed + result.failed == len(arrivals)
    assert result.failed == sim.poison.sum() > 0
    assert len(result.latencies_s) == result.completed
    clean = simulate(SimConfig(profile=LatencyProfile(20, 0.5), max_batch=32, workers=2), arrivals)
    assert clean.failed == 0 and clean.completed == len(arrivals)


def test_overheads_add_to_every_job():
    config = SimConfig(
        profile=LatencyProfile(10), max_batch=8, overheads=Overheads(0.001, 0.002, 0.003, 0.004)
    )
    result = simulate(config, np.array([0.0]))
    assert result.latencies_s.tolist() == pytest.approx([0.020])


def test_the_workers_own_cost_per_batch_spaces_back_to_back_batches():
    config = SimConfig(
        profile=LatencyProfile(10), max_batch=2, max_wait_s=0, overheads=Overheads(exec_s=0.001)
    )
    result = simulate(config, np.zeros(6))
    assert sorted(set(np.round(result.latencies_s, 6).tolist())) == pytest.approx([0.011, 0.022, 0.033])


def test_a_burst_at_zero_workers_scales_up_completes_everything_and_returns_to_zero():
    limits = ScalingLimits(min_workers=0, max_workers=3, latency_budget_s=0.150, scale_to_zero_after_s=8,
                           scale_down_cooldown_s=4)  # fmt: skip
    config = SimConfig(profile=LatencyProfile(100, 1), max_batch=128, scaling=limits, startup_s=5)
    result = simulate(config, np.zeros(1000), horizon_s=60)
    assert result.completed == 1000
    assert float(np.min(result.latencies_s)) >= 5.0, "nothing runs before the first worker is up"
    assert max(size for _, size in result.pool) >= 1
    assert result.pool[-1][1] == 0


def test_latency_profiles_parse_as_the_cli_takes_them():
    assert LatencyProfile.parse("100") == LatencyProfile(100, 0)
    assert LatencyProfile.parse("20+0.5b") == LatencyProfile(20, 0.5)
    assert LatencyProfile(20, 0.5).capacity(100) == pytest.approx(100 / 0.070)
    with pytest.raises(ValueError, match="latency profile"):
        LatencyProfile.parse("fast")


def test_a_manager_that_knows_the_batch_time_does_not_queue_its_first_batches():
    """A cold manager cuts partial batches at its window until it has timed one, and they queue behind
    the running batch; one that has run the model before times them to the worker from the start."""
    profile = LatencyProfile(100, 0)
    arrivals = poisson_arrivals(200, 5.0, seed=3)
    cold = simulate(SimConfig(profile=profile, max_batch=100), arrivals)
    warm = simulate(SimConfig(profile=profile, max_batch=100, batch_time_s=0.1), arrivals)
    assert warm.percentile_ms(99) < cold.percentile_ms(99)
    assert warm.percentile_ms(99) <= 2 * 100 + 5, "a job waits at most one batch, then runs in the next"


def mix(interactive: np.ndarray, batch_jobs: int, at: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """The interactive arrivals and `batch_jobs` batch jobs submitted at once at `at`, with their flags."""
    arrivals = np.concatenate([interactive, np.full(batch_jobs, at)])
    return arrivals, np.arange(len(arrivals)) >= len(interactive)


@pytest.mark.parametrize(
    ("profile", "max_batch", "rate"),
    [(LatencyProfile(100), 100, 400), (LatencyProfile(50), 100, 1000), (LatencyProfile(20, 0.5), 128, 300)],
    ids=["flat-100ms", "flat-50ms", "gpu-sim"],
)
def test_a_big_batch_backlog_delays_interactive_jobs_by_at_most_one_batch_time(
    profile: LatencyProfile, max_batch: int, rate: float
):
    """Interactive jobs wait for at most the one batch of batch jobs that runs when they arrive. On a GPU
    whose batch time grows with its size, topping their own batch up costs them the per-item time too."""
    config = SimConfig(profile=profile, max_batch=max_batch, batch_time_s=profile.seconds(max_batch))
    interactive = poisson_arrivals(rate, 30, seed=4)
    alone = simulate(config, interactive)
    arrivals, batch = mix(interactive, 20_000)
    mixed = simulate(config, arrivals, batch=batch)
    assert mixed.completed == len(arrivals)
    assert len(mixed.latencies_s) == len(interactive) and len(mixed.batch_latencies_s) == 20_000
    top_up_s = profile.per_item_ms * max_batch / 1000
    assert mixed.percentile_ms(99) <= alone.percentile_ms(99) + (profile.seconds(max_batch) + top_up_s) * 1000
    assert float(np.max(mixed.batch_latencies_s)) < config.batch_timeout_s, "every batch job in time"


def test_a_steady_interactive_load_that_fills_every_batch_cannot_hold_batch_jobs_past_their_deadline():
    # Interactive jobs alone fill one worker's every batch for 30 s; 500 batch jobs have 20 s each.
    profile = LatencyProfile(100)
    arrivals, batch = mix(poisson_arrivals(1000, 30, seed=4), 500)
    promoted = SimConfig(profile=profile, max_batch=100, batch_time_s=0.1, batch_timeout_s=20)
    result = simulate(promoted, arrivals, batch=batch)
    assert result.completed == len(arrivals)
    assert float(np.max(result.batch_latencies_s)) < 20, "past half their time they went first"
    # With a deadline far off they are not promoted, and wait for the interactive load to end.
    patient = simulate(replace(promoted, batch_timeout_s=1000), arrivals, batch=batch)
    assert float(np.max(patient.batch_latencies_s)) > 20


def test_a_batch_backlog_alone_starts_one_worker_and_grows_the_pool_no_further():
    limits = ScalingLimits(min_workers=0, max_workers=4, latency_budget_s=0.150, scale_to_zero_after_s=30,
                           scale_down_cooldown_s=10)  # fmt: skip
    config = SimConfig(profile=LatencyProfile(20, 0.5), max_batch=128, scaling=limits, startup_s=5)
    batch = simulate(config, np.zeros(20_000), horizon_s=60, batch=np.ones(20_000, dtype=bool))
    assert batch.completed == 20_000
    assert max(size for _, size in batch.pool) == 1, "one worker finishes them long before their deadline"
    interactive = simulate(config, np.zeros(20_000), horizon_s=60)
    assert max(size for _, size in interactive.pool) == 4, "as interactive jobs they want every worker"


def test_the_plan_holds_the_slo_for_interactive_jobs_and_reports_the_batch_ones_apart():
    request = PlanRequest(
        profile=LatencyProfile(20, 0.5), max_batch=128, slo_p99_s=0.060, rate=2000, duration_s=10
    )
    mixed = plan(replace(request, batch_share=0.5))
    assert mixed.meets_slo and mixed.result.percentile_ms(99) <= 60
    assert len(mixed.result.batch_latencies_s) == pytest.approx(mixed.result.completed / 2, rel=0.05)
    assert "| batch priority | 50% of the jobs" in mixed.table()
    assert mixed.workers <= plan(request).workers
