"""Every accepted job ends COMPLETED or FAILED with a reason, whatever is killed or restarted."""

from __future__ import annotations

import collections
import json
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from contract.keys import dead_letter_key, stream_key, worker_key
from tests.integration.faults import (
    FaultStack,
    accepted_ids,
    fault_env,
    submit_many,
    tally,
)
from tests.processes import free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUEUE_LIMIT = 2500


def report(name: str, counts: dict[str, int]) -> None:
    """Fault tests print their tally; the closing note of the issue quotes these lines."""
    print(f"\nFAULT-TALLY {name}: {json.dumps(counts)}")


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    root = tmp_path_factory.mktemp("faults")
    port = free_port()
    stack = FaultStack(root, port, fault_env(root, port))
    stack.start_redis()
    stack.start_worker("worker-1")
    stack.start_worker("worker-2")
    stack.wait_workers_ready("worker-1", "worker-2")
    stack.start_gateway(max_queue_length=QUEUE_LIMIT)
    yield stack
    stack.stop_all()


def post(faults: FaultStack, body: dict[str, object], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{faults.api}/async-infer",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-api-key": faults.api_key, **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(json.load(response))
    except urllib.error.HTTPError as refused:
        return refused.code, dict(json.load(refused))


def prompts(n: int, tag: str) -> list[dict[str, object]]:
    return [{"model": "gpu-sim", "prompt": f"{tag} job {i}"} for i in range(n)]


async def test_a_job_whose_every_attempt_fails_is_dead_lettered(faults: FaultStack):
    faults.start_manager("manager-dl")
    try:
        bodies = [{"model": "gpu-sim", "prompt": "!crash the device"}, *prompts(50, "dl")]
        replies = await submit_many(faults.api, faults.api_key, bodies)
        ids = accepted_ids(replies)
        jobs = faults.wait_final(ids, 60)
    finally:
        faults.stop("manager-dl")
    poison, rest = jobs[0], jobs[1:]
    assert poison["status"] == "FAILED"
    assert poison["error_code"] == "max_attempts_exceeded"
    assert "simulated device fault" in poison["error_message"]
    dead = faults.redis().xrange(dead_letter_key("gpu-sim"))
    assert [entry["id"] for _, entry in dead] == [ids[0]]
    assert dead[0][1]["error_code"] == "max_attempts_exceeded"
    assert all(j["status"] == "COMPLETED" for j in rest), "batch-mates of a poison prompt must still complete"
    report("dead-letter", tally(jobs, len(ids)))


async def test_past_the_queue_limit_submissions_get_429_and_every_202_completes(faults: FaultStack):
    # No manager is running: nothing drains the queue while it fills.
    replies = await submit_many(faults.api, faults.api_key, prompts(QUEUE_LIMIT + 300, "overload"))
    statuses = collections.Counter(status for status, _ in replies)
    rejected = [payload for status, payload in replies if status == 429]
    assert statuses[429] >= 300
    assert set(statuses) == {202, 429}
    assert all(p["error"]["code"] == "queue_full" and p["retry_after"] == "1" for p in rejected)
    ids = accepted_ids(replies)
    assert len(ids) <= QUEUE_LIMIT

    faults.start_manager("manager-overload")
    try:
        jobs = faults.wait_final(ids, 120)
    finally:
        faults.stop("manager-overload")
    counts = tally(jobs, len(ids))
    report("overload", {**counts, "rejected_429": statuses[429]})
    assert counts["completed"] == len(ids)


async def test_a_full_redis_refuses_new_jobs_with_503_and_keeps_the_accepted_ones(faults: FaultStack):
    # No manager is running: the accepted jobs are still queued when Redis fills up.
    client = faults.redis()
    accepted = accepted_ids(await submit_many(faults.api, faults.api_key, prompts(50, "before full")))
    assert len(accepted) == 50
    keys_before, queued_before = client.dbsize(), client.xlen(stream_key("gpu-sim"))
    assert queued_before == 50
    client.config_set("maxmemory-policy", "noeviction")  # Redis's default, which the local stack keeps
    client.config_set("maxmemory", "1")  # below what Redis already holds: every write is refused
    try:
        refused = await submit_many(faults.api, faults.api_key, prompts(20, "while full"))
        assert {status for status, _ in refused} == {503}
        assert {payload["error"]["code"] for _, payload in refused} == {"store_full"}
        assert {payload["retry_after"] for _, payload in refused} == {"5"}
        # With an Idempotency-Key the key's record is written first, and Powertools reports its failure.
        status, error = post(faults, {"model": "gpu-sim", "prompt": "keyed"}, {"Idempotency-Key": "full-1"})
        assert (status, error["error"]["code"]) == (503, "unavailable")
        assert (client.dbsize(), client.xlen(stream_key("gpu-sim"))) == (keys_before, queued_before)
    finally:
        client.config_set("maxmemory", "0")

    faults.start_manager("manager-full")
    try:
        jobs = faults.wait_final(accepted, 60)
    finally:
        faults.stop("manager-full")
    report("redis-full", {**tally(jobs, len(accepted)), "refused_503": len(refused)})
    assert [j["status"] for j in jobs] == ["COMPLETED"] * 50


async def test_two_managers_share_2000_jobs_and_run_each_once(faults: FaultStack):
    faults.start_manager("manager-a")
    faults.start_manager("manager-b")
    try:
        bodies = prompts(2000, "pair")
        ids = accepted_ids(await submit_many(faults.api, faults.api_key, bodies))
        jobs = faults.wait_final(ids, 180)
    finally:
        faults.stop("manager-a")
        faults.stop("manager-b")
    assert len(ids) == 2000
    assert [j["status"] for j in jobs] == ["COMPLETED"] * 2000
    assert [json.loads(j["result"])["text"] for j in jobs] == [str(b["prompt"])[::-1] for b in bodies]
    runs = collections.Counter(int(j["runs"]) for j in jobs)
    assert runs == {1: 2000}, f"every job should run exactly once, got {runs}"
    assert len({j["manager"] for j in jobs}) == 2, "both managers should have taken work"
    report("two-managers", {**tally(jobs, len(ids)), "ran_twice": sum(n for r, n in runs.items() if r > 1)})


async def test_kill9_the_manager_mid_load_and_a_new_one_finishes_every_job(faults: FaultStack):
    bodies = prompts(1000, "crash")
    ids = accepted_ids(await submit_many(faults.api, faults.api_key, bodies))
    faults.start_manager("manager-doomed")
    faults.wait_any_completed(ids)
    faults.kill9("manager-doomed")
    at_kill = collections.Counter(j["status"] for j in faults.jobs(ids))
    assert at_kill["COMPLETED"] < 1000, "the manager should die with work in hand"

    faults.start_manager("manager-heir")
    try:
        jobs = faults.wait_final(ids, 120)
    finally:
        faults.stop("manager-heir")
    assert [j["status"] for j in jobs] == ["COMPLETED"] * 1000
    assert [json.loads(j["result"])["text"] for j in jobs] == [str(b["prompt"])[::-1] for b in bodies]
    # Batches in flight when the manager died run again on the heir (at least once); their results
    # are written once, by the check-and-set completion.
    rerun = sum(int(j["runs"]) > 1 for j in jobs)
    report(
        "kill-manager",
        {**tally(jobs, len(ids)), "completed_before_kill": at_kill["COMPLETED"], "rerun": rerun},
    )


async def test_restart_redis_mid_load_and_every_accepted_job_completes(faults: FaultStack):
    bodies = prompts(1000, "restart")
    ids = accepted_ids(await submit_many(faults.api, faults.api_key, bodies))
    faults.start_manager("manager-r")
    try:
        faults.wait_any_completed(ids)
        faults.stop_redis()  # SIGTERM: Redis writes its AOF and exits, as in a planned failover
        faults.start_redis()
        jobs = faults.wait_final(ids, 120)
    finally:
        faults.stop("manager-r")
    counts = tally(jobs, len(ids))
    report("restart-redis", counts)
    assert counts["completed"] == 1000
    # a batch started while Redis was down records its run with its outcome
    assert min(int(j.get("runs", 0)) for j in jobs) >= 1
    assert all(j.get("worker") for j in jobs)


async def test_kill9_a_worker_mid_load_and_every_job_ends_with_a_reason(faults: FaultStack):
    bodies = [{**b, "timeoutMs": 30_000} for b in prompts(1000, "worker")]
    ids = accepted_ids(await submit_many(faults.api, faults.api_key, bodies))
    faults.start_manager("manager-w")
    try:
        faults.wait_any_completed(ids)
        registry = faults.redis()
        faults.kill9("worker-1")
        # A dead worker stops renewing its registration, which lives three heartbeats (1 s each here).
        assert 0 < registry.pttl(worker_key("worker-1")) <= 3000
        jobs = faults.wait_final(ids, 60)
        wait_until(lambda: not registry.exists(worker_key("worker-1")), 10, "worker-1 to drop out")
    finally:
        faults.stop("manager-w")
    statuses = collections.Counter(j["status"] for j in jobs)
    assert set(statuses) <= {"COMPLETED", "FAILED"}, statuses
    assert all(j.get("error_code") for j in jobs if j["status"] == "FAILED")
    assert statuses["COMPLETED"] > 0
    report("kill-worker", tally(jobs, len(ids)))


async def test_sigterm_drains_the_manager_within_30_s_and_loses_nothing(faults: FaultStack):
    bodies = prompts(1500, "drain")
    ids = accepted_ids(await submit_many(faults.api, faults.api_key, bodies))
    faults.start_manager("manager-leaving")
    faults.wait_any_completed(ids)
    proc = faults.procs.pop("manager-leaving")
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(40)
    took = time.monotonic() - started
    assert code == 0
    assert took < 30, f"the manager took {took:.1f} s to stop"

    faults.start_manager("manager-after")
    try:
        jobs = faults.wait_final(ids, 120)
    finally:
        faults.stop("manager-after")
    counts = tally(jobs, len(ids))
    report("sigterm-manager", {**counts, "stop_seconds": round(took, 1)})
    assert counts["completed"] == len(ids)


async def test_a_worker_told_it_will_be_interrupted_drains_and_runs_no_job_twice(faults: FaultStack):
    """A Spot interruption or an ECS instance draining reaches the worker as SIGTERM (its container is
    stopped, with ECS's stop timeout before SIGKILL): it stops taking work, finishes what it holds and
    exits, while the other worker takes the rest. Every job completes, in exactly one batch."""
    faults.start_worker("worker-3")  # earlier tests killed worker-1: two workers serve again
    faults.wait_workers_ready("worker-2", "worker-3")
    bodies = [{**b, "timeoutMs": 60_000} for b in prompts(1000, "interrupted")]
    ids = accepted_ids(await submit_many(faults.api, faults.api_key, bodies))
    faults.start_manager("manager-s")
    try:
        faults.wait_any_completed(ids)
        leaving = faults.procs.pop("worker-2")
        started = time.monotonic()
        leaving.send_signal(signal.SIGTERM)
        code = leaving.wait(60)
        took = time.monotonic() - started
        jobs = faults.wait_final(ids, 120)
        samples = faults.manager_metrics("manager-s")
    finally:
        faults.stop("manager-s")
    counts = tally(jobs, len(ids))
    failed_batches = sum(v for k, v in samples.items() if k.startswith("synapse_batch_failures_total{"))
    rows_run = samples['synapse_batch_size_sum{model="gpu-sim"}']
    report("interrupted-worker", {**counts, "rows_run": int(rows_run), "stop_seconds": round(took, 1)})
    assert code == 0, "the interrupted worker drained and exited cleanly"
    # ECS waits its stop timeout (at most 120 s, the Spot notice's length) before SIGKILL.
    assert took < 120
    assert counts["completed"] == len(ids)
    assert failed_batches == 0, "no batch failed over to the other worker"
    assert rows_run == len(ids), "each job ran in exactly one batch"
