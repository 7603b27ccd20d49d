import numpy as np
import pytest

from manager.autoscaling import ScalingLimits
from planner.plan import PlanRequest, plan
from planner.simulator import LatencyProfile, Overheads, SimConfig, poisson_arrivals, simulate

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
    result = simulate(config, np.array([0.0, 0.001, 0.030]))
    # Job 1 goes at once to the idle worker. Job 2 does not queue behind it when its 20 ms window
    # ends: the worker is busy until 50 ms, so the batch waits until 5 ms (lead_s) before that, job 3
    # joins it, and the pair runs as soon as job 1's batch is done.
    assert result.latencies_s.tolist() == pytest.approx([0.050, 0.099, 0.070])
    assert result.batch_sizes.tolist() == [1, 2]


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
