from pathlib import Path

import numpy as np
import pytest

from bench.measure import Figures, JobTiming, SweepPoint, Trial, batches, busy_ratio
from bench.report import targets
from bench.scaling import hot_spots
from bench.stack import gpu_sim_repository
from planner.plan import main as plan_main
from planner.simulator import Overheads, SimResult


def job(started: int, completed: int, worker: str = "w1", size: int = 10, created: int = 0) -> JobTiming:
    return JobTiming(created, started, completed, size, worker, "COMPLETED")


def test_jobs_of_one_batch_make_one_batch_and_batches_are_told_apart_by_worker_and_times():
    jobs = [job(0, 100), job(0, 100), job(0, 100, worker="w2"), job(100, 200)]
    assert sorted(batches(jobs)) == [("w1", 0, 100), ("w1", 100, 200), ("w2", 0, 100)]


def test_two_batches_in_flight_at_once_count_their_overlap_once():
    # Batches 0-100 and 50-150 on one worker: in flight 150 ms of the 200 ms window.
    jobs = [job(0, 100), job(50, 150)]
    assert busy_ratio(jobs, 0, 200, workers=1) == pytest.approx(0.75)


def test_busy_time_is_clipped_to_the_window_and_shared_over_the_workers():
    jobs = [job(-50, 50), job(100, 300, worker="w2")]
    assert busy_ratio(jobs, 0, 200, workers=2) == pytest.approx((50 + 100) / 400)


def test_a_benchmark_repository_sets_the_profile_the_batch_limit_and_the_batcher(tmp_path: Path):
    repo = gpu_sim_repository(tmp_path, base_ms=100, per_item_ms=0, max_batch=100, instances=3,
                              queue_delay_us=20_000)  # fmt: skip
    config = (repo / "gpu-sim" / "config.pbtxt").read_text()
    assert 'key: "base_ms" value: { string_value: "100" }' in config
    assert 'key: "per_item_ms" value: { string_value: "0" }' in config
    assert "max_batch_size: 100" in config
    assert "instance_group [ { count: 3" in config
    assert "dynamic_batching { max_queue_delay_microseconds: 20000 }" in config
    assert (repo / "gpu-sim" / "1" / "model.py").exists()


def test_the_profile_summary_counts_innermost_frames_and_the_managers_own_functions(tmp_path: Path):
    raw = tmp_path / "profile.txt"
    raw.write_text(
        "main (local_stack/cli.py:1);ModelDispatcher._write (manager/dispatcher.py:9);"
        "dumps (json/__init__.py:2) 3\n"
        "main (local_stack/cli.py:1);JobQueue.read (manager/queue.py:5);_readline (redis/base.py:7) 1\n"
    )
    inner, ours = hot_spots(raw)
    assert inner[0] == ("dumps (json/__init__.py:2)", 0.75)
    assert dict(ours) == {"ModelDispatcher._write": 0.75, "JobQueue.read": 0.25}


def test_a_missed_target_says_by_how_much():
    found = {t.what: t for t in targets({"jobs_per_s": 4000.0})}
    verdict = found["manager >= 5,000 jobs/s on one core (aim 20,000)"]
    assert not verdict.met
    assert verdict.gap == "80% of the target"


def test_synapse_plan_prints_the_pool_for_each_slo(capsys: pytest.CaptureFixture[str]):
    plan_main(["--rate", "2000", "--slo-ms", "500", "--slo-ms", "250", "--duration", "5"])
    out = capsys.readouterr().out
    assert out.count("workers needed") == 2
    assert "## P99 SLO 250 ms" in out


def test_a_latency_verdict_is_inconclusive_when_the_load_generator_fell_behind():
    key = {"p99_direct_ms": 200.0, "p99_http_ms": 240.0, "p99_one_in_flight_ms": 300.0, "busy_direct": 0.9,
           "cost_direct": 1.0, "cost_naive": 100.0, "p99_dynamic_ms": 190.0, "lag_direct_ms": 2.0,
           "lag_http_ms": 400.0, "lag_one_ms": 1.0, "lag_dynamic_ms": 3.0}  # fmt: skip
    found = {t.what: t for t in targets(key)}
    assert found["P99 < 250 ms at 80 % load (direct)"].met
    assert not found["P99 < 250 ms at 80 % load (direct)"].doubt
    assert "400 ms late" in found["P99 < 250 ms at 80 % load (HTTP)"].doubt
    assert found["P99 overhead vs Triton's batcher <= 15 ms"].met
    assert not found["P99 < 250 ms at 80 % load (direct, SYNAPSE_MAX_INFLIGHT_BATCHES=1)"].met


def trial(measured_ms: float, simulated_ms: float, busy: float = 0.9) -> Trial:
    latency = np.array([measured_ms])
    measured = Figures("run", 100.0, 1, 1, 0, 0, 1.0, latency, latency, busy=busy)
    simulated = SimResult(np.array([simulated_ms / 1000]), np.array([1]), busy, 1.0, 1.0, 1, [], 1.0)
    return Trial(measured, simulated)


def test_a_load_level_is_judged_on_the_median_trial_so_one_stalled_run_does_not_decide_it():
    calm, stalled, calmer = trial(200, 210), trial(260, 210), trial(200, 202)
    point = SweepPoint(100.0, (calm, stalled, calmer), Overheads())
    p99_error, busy_error = point.errors()
    assert p99_error == pytest.approx(0.05)  # the 5 % of `calm`, not the 19 % of `stalled`
    assert busy_error == 0.0
    assert point.typical is calm


def test_a_load_level_with_two_stalled_runs_of_three_fails():
    point = SweepPoint(100.0, (trial(260, 210), trial(200, 210), trial(250, 210)), Overheads())
    assert point.errors()[0] == pytest.approx(40 / 250)


def test_a_load_level_needs_a_trial():
    with pytest.raises(ValueError, match="at least one trial"):
        SweepPoint(100.0, (), Overheads())
