"""A hung Triton (SIGSTOP) is replaced, and no job is lost or stuck past its deadline meanwhile.

One manager scales local workers (exactly one: min = max = 1) with the shipped timing defaults (2 s
heartbeat, Triton given up after 15 s unready). The test stops the worker's `tritonserver` and
checks that its agent exits, the provider starts another worker, and every accepted job ends
COMPLETED or FAILED with a reason by its deadline plus a margin.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from contract.keys import WORKERS_KEY, worker_key
from tests.integration.conftest import base_env
from tests.integration.faults import FINAL, FaultStack, accepted_ids, slow_gpu_sim, submit_many
from tests.processes import free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MARGIN_MS = 5_000  # a job's outcome is written at most this long after its deadline
TIMEOUT_MS = 20_000  # every job's deadline
UNREADY_EXIT_S = 15.0  # the default `triton_unready_exit_s`
HEARTBEAT_S = 2.0  # the default `heartbeat_s`
GIVE_UP_S = UNREADY_EXIT_S + 3 * HEARTBEAT_S  # when, at the latest, the agent must have exited
WORKER_START_S = 120


# --- processes, from /proc (no psutil, no pgrep) -------------------------------------------------


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None and stat[1] == pid:
            found.append(int(entry.name))
    return found


def cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ""


def comm(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/comm").read_text().strip()
    return ""


def running(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def worker_processes(manager_pid: int) -> list[tuple[int, int]]:
    """(agent pid, tritonserver pid) of each worker the manager started that has its Triton up."""
    pairs = []
    for agent in children(manager_pid):
        if "worker_image" in cmdline(agent):
            pairs += [(agent, p) for p in children(agent) if comm(p) == "tritonserver"]
    return pairs


def processes_under(root: Path) -> list[int]:
    """Every process whose environment names this test's folder: what it started, at any depth."""
    marker = str(root).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if marker in (entry / "environ").read_bytes() and running(int(entry.name)):
                    found.append(int(entry.name))
    return found


def signal_quietly(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


# --- the platform ---------------------------------------------------------------------------------


@dataclass
class Worker:
    id: str
    agent: int
    triton: int


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    """Redis, the gateway, and a manager keeping exactly one local worker."""
    root = tmp_path_factory.mktemp("hung")
    port = free_port()
    env = base_env(f"redis://127.0.0.1:{port}/0", root / "state")
    env.update(
        SYNAPSE_MODEL_REPOSITORY=str(slow_gpu_sim(root / "models", base_ms=60, per_item_ms=1)),
        SYNAPSE_MODELS="gpu-sim",
        SYNAPSE_WORKER_MODELS="gpu-sim",
        SYNAPSE_WORKER_PROVIDER="local",
        SYNAPSE_MIN_WORKERS="1",
        SYNAPSE_MAX_WORKERS="1",
        SYNAPSE_TRITON_TIMEOUT_S="3",
        SYNAPSE_RECLAIM_IDLE_S="4",
        SYNAPSE_PUSHGATEWAY_URL="http://127.0.0.1:9",  # nothing listens: no push into a developer's stack
    )
    stack = FaultStack(root, port, env)
    try:
        stack.start_redis()
        stack.start_gateway(max_queue_length=100_000)
        stack.start_manager("manager")
        yield stack
    finally:
        stack.stop_all()
        leaked = processes_under(root)
        for pid in leaked:  # a SIGSTOPped process ignores everything but SIGKILL (and SIGCONT)
            signal_quietly(pid, signal.SIGCONT)
            signal_quietly(pid, signal.SIGKILL)
        assert not leaked, "left running: " + "; ".join(f"{p} {cmdline(p)[:120]}" for p in leaked)


def ready_worker(stack: FaultStack, other_than: str = "") -> Worker:
    """The manager's one READY worker (not `other_than`), with its agent and Triton processes."""
    client = stack.redis()
    found: list[Worker] = []

    def check() -> bool:
        ids = [w for w in client.smembers(WORKERS_KEY) if w != other_than]  # type: ignore[union-attr]
        ready = [w for w in ids if client.hget(worker_key(w), "state") == "READY"]
        pairs = worker_processes(stack.procs["manager"].pid)
        if len(ready) == 1 and len(pairs) == 1:
            found.append(Worker(ready[0], *pairs[0]))
            return True
        return False

    wait_until(check, WORKER_START_S, "a READY worker", stack.procs["manager"], stack.log("manager"))
    return found[-1]


class RegistrationTimeline:
    """The worker's registered state every 100 ms (None: not registered), in a thread."""

    def __init__(self, client: redis.Redis, worker_id: str) -> None:
        self.samples: list[tuple[float, str | None]] = []
        self._client, self._key = client, worker_key(worker_id)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(redis.RedisError):
                self.samples.append((time.monotonic(), self._client.hget(self._key, "state")))  # type: ignore[arg-type]
            self._stop.wait(0.1)

    def __enter__(self) -> RegistrationTimeline:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def dropped_while(self, alive: float) -> int:
        """How often the registration was missing before `alive` (monotonic): it must never be."""
        return sum(1 for at, state in self.samples if at < alive and state is None)


async def submit_over(stack: FaultStack, n: int, seconds: float, tag: str) -> list[str]:
    """n jobs in rounds spread over `seconds`; returns the accepted ids."""
    rounds = max(1, int(seconds))
    ids: list[str] = []
    for r in range(rounds):
        bodies = [{"model": "gpu-sim", "prompt": f"{tag} {r}.{i}", "timeoutMs": TIMEOUT_MS}
                  for i in range(n // rounds)]  # fmt: skip
        ids += accepted_ids(await submit_many(stack.api, stack.api_key, bodies))
        await asyncio.sleep(seconds / rounds)
    return ids


def settle(stack: FaultStack, ids: list[str]) -> list[dict[str, str]]:
    """The jobs once every one is final, or once the last deadline plus the margin has passed."""
    deadline_ms = max(int(j["deadline_ms"]) for j in stack.jobs(ids) if j)
    return stack.wait_final(ids, max(0.0, (deadline_ms + MARGIN_MS) / 1000 - time.time()))


def past_margin(job: dict[str, str], at_ms: float) -> bool:
    return at_ms > int(job["deadline_ms"]) + MARGIN_MS


def tally(name: str, jobs: list[dict[str, str]], accepted: int) -> dict[str, int]:
    """accepted / completed / failed / lost (hash missing) / stuck (not final past deadline + margin) /
    late (final, but written past deadline + margin)."""
    now_ms = time.time() * 1000
    final = [j for j in jobs if j.get("status") in FINAL]
    counts = {
        "accepted": accepted,
        "completed": sum(j["status"] == "COMPLETED" for j in final),
        "failed": sum(j["status"] == "FAILED" for j in final),
        "lost": sum(not j for j in jobs),
        "stuck": sum(bool(j) and j.get("status") not in FINAL and past_margin(j, now_ms) for j in jobs),
        "late": sum(past_margin(j, int(j["completed_ms"])) for j in final),
    }
    print(f"\nFAULT-TALLY {name}: " + " ".join(f"{k}={v}" for k, v in counts.items()))
    return counts


def assert_every_job_ended_in_time(jobs: list[dict[str, str]], counts: dict[str, int]) -> None:
    assert counts["lost"] == 0 and counts["stuck"] == 0, counts
    assert counts["completed"] + counts["failed"] == counts["accepted"], counts
    assert counts["late"] == 0, "every outcome is written by its job's deadline plus the margin"
    reasons = {j.get("error_code") for j in jobs if j.get("status") == "FAILED"}
    assert all(reasons), "a FAILED job says why"


def exit_logged(stack: FaultStack, worker: Worker) -> int | None:
    """The exit code the provider logged for this worker's agent, if it has noticed the exit yet."""
    pattern = rf"worker {re.escape(worker.id)} \(pid {worker.agent}\) exited with code (-?\d+)"
    found = re.search(pattern, stack.log("manager").read_text())
    return int(found.group(1)) if found else None


def wait_given_up(stack: FaultStack, worker: Worker, stopped_at: float) -> float:
    """Waits for the agent to exit and its Triton to be gone; returns how long after the stop."""
    wait_until(lambda: not running(worker.agent), GIVE_UP_S + 10, f"agent {worker.id} to exit")
    took = time.monotonic() - stopped_at
    assert not running(worker.triton), "the agent kills its stopped Triton on the way out"
    wait_until(lambda: exit_logged(stack, worker) is not None, 10, "the provider to log the exit")
    assert exit_logged(stack, worker) != 0
    return took


# --- the tests ------------------------------------------------------------------------------------


async def test_triton_hung_for_30_s_then_resumed_loses_nothing(one_worker: FaultStack):
    worker = ready_worker(one_worker)
    client = one_worker.redis()
    with RegistrationTimeline(client, worker.id) as timeline:
        os.kill(worker.triton, signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            ids = await submit_over(one_worker, 300, 10, "hung-30s")
            took = await asyncio.to_thread(wait_given_up, one_worker, worker, stopped_at)
            await asyncio.sleep(max(0.0, stopped_at + 30 - time.monotonic()))
        finally:
            signal_quietly(worker.triton, signal.SIGCONT)  # resumed after 30 s, if it is still there
        jobs = await asyncio.to_thread(settle, one_worker, ids)
    counts = tally("hung-30s", jobs, len(ids))
    dropped = timeline.dropped_while(stopped_at + took - 2)  # it deregisters just before it exits
    print(f"HUNG-30S agent exited {took:.1f} s after SIGSTOP; registration missing {dropped} times before")

    assert len(ids) == 300
    assert_every_job_ended_in_time(jobs, counts)
    assert took <= GIVE_UP_S, f"the agent took {took:.1f} s to give up on its Triton"
    assert dropped == 0, "a live worker's registration never lapses, hung Triton or not"
    assert {s for _, s in timeline.samples if s} <= {"READY", "DEGRADED", "DRAINING"}
    assert counts["completed"] > 0, "jobs still in time run on the replacement worker"
    ready_worker(one_worker, other_than=worker.id)


async def test_triton_hung_for_good_is_replaced_and_later_jobs_complete(one_worker: FaultStack):
    worker = ready_worker(one_worker)
    client = one_worker.redis()
    os.kill(worker.triton, signal.SIGSTOP)  # never resumed
    stopped_at = time.monotonic()
    during = await submit_over(one_worker, 100, 2, "during the hang")
    took = await asyncio.to_thread(wait_given_up, one_worker, worker, stopped_at)
    assert not client.exists(worker_key(worker.id)), "the agent deregisters on its way out"

    heir = await asyncio.to_thread(ready_worker, one_worker, worker.id)
    replaced_after = time.monotonic() - stopped_at
    after = await submit_over(one_worker, 200, 2, "after the hang")
    jobs = await asyncio.to_thread(settle, one_worker, during + after)
    counts = tally("hung-for-good", jobs, len(during + after))
    print(f"HUNG-FOR-GOOD agent exited {took:.1f} s after SIGSTOP; {heir.id} READY at {replaced_after:.1f} s")

    assert heir.id != worker.id and heir.agent != worker.agent
    assert_every_job_ended_in_time(jobs, counts)
    assert [j["status"] for j in jobs[len(during) :]] == ["COMPLETED"] * len(after)
    assert {j["worker"] for j in jobs[len(during) :]} == {heir.id}
