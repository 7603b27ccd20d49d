"""Scenarios 3 and 4: a burst that arrives at an empty pool, and how many jobs one manager moves."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import math
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import numpy as np
import redis

from bench import plots
from bench.measure import JobTiming, pct, read_jobs
from bench.report import _ms
from bench.scenarios import MAX_BATCH, STANDARD, Options, Section, _settings
from bench.stack import API_KEY, BenchStack, cpu_seconds, gpu_sim_repository
from contract.job_store import JobStore
from contract.jobs import Job
from contract.keys import WORKERS_KEY, stream_key, worker_key
from contract.redis_client import sync_client
from contract.settings import Settings
from manager.autoscaling import ScalingLimits
from planner.simulator import SimConfig, SimResult, simulate

BURST_JOBS = 1000
MANAGER_INFLIGHT = 4
BURST_MAX_WORKERS = 4
BURST_IDLE_S = 10
BURST_COOLDOWN_S = 5
DEADLINE_MS = 60_000


class Sampler:
    """Calls `probe` every `every_s` seconds in a thread and keeps (seconds since start, value)."""

    def __init__(self, probe: Callable[[], float], every_s: float = 0.25) -> None:
        self.samples: list[tuple[float, float]] = []
        self._probe, self._every = probe, every_s
        self._stop = threading.Event()
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(redis.RedisError, OSError, ValueError):
                self.samples.append((time.monotonic() - self.started, self._probe()))
            self._stop.wait(self._every)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def ready_workers(client: redis.Redis) -> float:
    ids = list(client.smembers(WORKERS_KEY))  # type: ignore[arg-type]
    pipe = client.pipeline(transaction=False)
    for worker_id in ids:
        pipe.hget(worker_key(worker_id), "state")
    return float(sum(state == "READY" for state in pipe.execute()))


async def post_burst(api: str, n: int) -> list[str]:
    """n POSTs at once, as n clients would send them, each retried after a 503's Retry-After; returns
    the accepted job ids."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), headers={"x-api-key": API_KEY},
                                     timeout=aiohttp.ClientTimeout(total=120)) as session:  # fmt: skip

        async def one(i: int) -> str:
            body = {"model": "gpu-sim", "prompt": f"burst {i}"}
            while True:  # a 503 from a gateway at its capacity is asked again after its Retry-After
                async with session.post(f"{api}/async-infer", json=body) as response:
                    payload = await response.json()
                    if response.status != 503:
                        return str(payload.get("jobId", "")) if response.status == 202 else ""
                    retry_after = float(response.headers.get("Retry-After") or 1)
                await asyncio.sleep(retry_after)

        return [job_id for job_id in await asyncio.gather(*(one(i) for i in range(n))) if job_id]


def _wait(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.25)
    return False


def burst(opts: Options) -> Section:
    """Scenario 3: 1,000 concurrent requests through HTTP with no worker running; the autoscaler
    (local provider) starts workers, and takes the pool back to zero when the jobs are done."""
    n = 200 if opts.quick else BURST_JOBS
    with BenchStack(opts.out / "raw" / "burst") as stack:
        stack.start_redis()
        repo = gpu_sim_repository(
            stack.root / "models", base_ms=STANDARD.base_ms, per_item_ms=0, max_batch=MAX_BATCH
        )
        stack.repository = repo  # the workers the manager starts serve it
        stack.start_manager(
            SYNAPSE_WORKER_PROVIDER="local", SYNAPSE_MIN_WORKERS="0",
            SYNAPSE_MAX_WORKERS=str(BURST_MAX_WORKERS), SYNAPSE_SCALE_TO_ZERO_AFTER=str(BURST_IDLE_S),
            SYNAPSE_SCALE_DOWN_COOLDOWN_S=str(BURST_COOLDOWN_S),
        )  # fmt: skip
        stack.start_gateway()
        client = stack.redis()
        with Sampler(lambda: ready_workers(client)) as pool:
            t0 = time.time()
            ids = asyncio.run(post_burst(stack.api, n))
            _wait(lambda: client.xlen(stream_key("gpu-sim")) == 0, 180)
            jobs = read_jobs(client, ids)
            _wait(lambda: ready_workers(client) == 0 and pool.samples[-1][1] == 0, 90)
            back_to_zero = time.monotonic() - pool.started
    final = [j for j in jobs if j is not None]
    done = sorted(j.completed_ms for j in final if j.status == "COMPLETED")
    first = (done[0] / 1000 - t0) if done else float("nan")
    last = (done[-1] / 1000 - t0) if done else float("nan")
    late = sum(1 for j in final if j.status != "COMPLETED" or j.total_ms > DEADLINE_MS)
    offset = t0 - (time.time() - (time.monotonic() - pool.started))
    samples = [(max(0.0, t - offset), int(v)) for t, v in pool.samples]
    changes = [s for i, s in enumerate(samples) if i == 0 or s[1] != samples[i - 1][1]]
    curve = [(c / 1000 - t0, i + 1) for i, c in enumerate(done)]
    png = plots.pool_timeline(opts.out / "burst-pool.png", samples, curve)
    worker_s = sum((b[0] - a[0]) * a[1] for a, b in itertools.pairwise(samples))
    timeline = ", ".join(f"{t:.1f} s: {k}" for t, k in changes)
    startup = next((t for t, k in samples if k > 0), float("nan"))
    sim = simulate_burst(n, startup)
    sim_done = np.sort(sim.latencies_s)
    markdown = f"""{n:,} requests POSTed at once through the gateway with 0 workers running; the manager's
autoscaler (local provider, at most {BURST_MAX_WORKERS} workers, back to zero after {BURST_IDLE_S} s without jobs) starts
workers.

| accepted | completed | failed | lost | late (past the {DEADLINE_MS // 1000} s deadline) | first result | last result | pool back to 0 |
| --- | --- | --- | --- | --- | --- | --- | --- |
| {len(ids):,} | {len(done):,} | {sum(j.status == "FAILED" for j in final)} | {len(ids) - len(final)} | {late} | {first:.1f} s | {last:.1f} s | {back_to_zero:.0f} s |

Job latency (job timings): P50 {_ms(pct([j.total_ms for j in final], 50))} ms, P99 {_ms(pct([j.total_ms for j in final], 99))} ms.
Pool size over time (seconds since the burst: workers READY): {timeline}. Worker-seconds READY: {worker_s:.0f}.
The simulator, with the autoscaler's own policy and this run's {startup:.1f} s to the first READY worker, predicts
the first result at {sim_done[0]:.1f} s and the last at {sim_done[-1]:.1f} s, the pool peaking at
{max(k for _, k in sim.pool)} READY.

![pool size over time]({png.name})
"""  # noqa: E501
    key = {"burst_lost": float(len(ids) - len(final) + (n - len(ids))), "burst_late": float(late),
           "burst_first_s": first, "burst_last_s": last}  # fmt: skip
    return Section("Burst from zero (scenario 3)", markdown, key=key)


def simulate_burst(n: int, startup_s: float) -> SimResult:
    """The burst in the simulator: the autoscaling limits this scenario gives the manager."""
    limits = ScalingLimits(
        min_workers=0,
        max_workers=BURST_MAX_WORKERS,
        latency_budget_s=Settings.from_env({}).latency_budget_ms / 1000,
        scale_to_zero_after_s=BURST_IDLE_S,
        scale_down_cooldown_s=BURST_COOLDOWN_S,
    )
    startup = 5.0 if math.isnan(startup_s) else startup_s  # no worker came up: assume 5 s
    config = SimConfig(profile=STANDARD, max_batch=MAX_BATCH, scaling=limits, startup_s=startup)
    return simulate(config, np.zeros(n), horizon_s=60)


def preload(stack: BenchStack, n: int) -> list[str]:
    """n jobs straight into Redis with the front door's submit function, before any manager runs."""
    store = JobStore(sync_client(_settings(stack)), 86_400, max(n, 100_000))
    ids = []
    for i in range(n):
        job = Job.new(model="gpu-sim", prompt=f"preloaded {i}", max_tokens=16, timeout_ms=600_000)
        store.submit(job)
        ids.append(job.id)
    return ids


def _profile(pid: int, out: Path, seconds: int) -> subprocess.Popen[bytes] | None:
    """py-spy samples the manager while it works: the hot path, for the report."""
    spy = shutil.which("py-spy") or str(Path(__import__("sys").executable).parent / "py-spy")
    if not Path(spy).exists():
        return None
    argv = [spy, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", "200", "--format", "raw",
            "--output", str(out), "--nonblocking"]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def hot_spots(raw: Path, top: int = 10) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """From py-spy's collapsed stacks ("a;b;c count"): the share of samples per innermost frame, and
    per function of the project (manager/) anywhere on the stack, i.e. inclusive of what it calls."""
    inner: collections.Counter[str] = collections.Counter()
    ours: collections.Counter[str] = collections.Counter()
    if not raw.exists():
        return [], []
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        inner[frames[-1]] += int(count)
        for frame in {f.split(" (")[0] for f in frames if "manager/" in f and "local_stack/cli.py" not in f}:
            ours[frame] += int(count)
    total = sum(inner.values()) or 1
    return (
        [(frame, c / total) for frame, c in inner.most_common(top)],
        [(frame, c / total) for frame, c in ours.most_common(top)],
    )


def manager_throughput(opts: Options) -> Section:
    """Scenario 4: jobs pre-loaded into Redis, one manager, one worker with an instant model."""
    n = 5_000 if opts.quick else 50_000
    with BenchStack(opts.out / "raw" / "manager") as stack:
        stack.start_redis()
        repo = gpu_sim_repository(stack.root / "models", base_ms=0, per_item_ms=0, max_batch=128)
        stack.start_worker("worker-instant", repo)
        ids = preload(stack, n)
        client = stack.redis()
        # Four batches in flight keep the manager, not the round trips of one worker, the limit.
        pid = stack.start_manager(SYNAPSE_MAX_INFLIGHT_BATCHES=str(MANAGER_INFLIGHT))
        spy = _profile(pid, opts.out / "raw" / "manager-profile.txt", 5 if opts.quick else 10)
        with Sampler(lambda: cpu_seconds(pid), every_s=0.1) as cpu:
            _wait(lambda: client.xlen(stream_key("gpu-sim")) == 0, 600)
        if spy is not None:
            spy.wait(60)
        jobs: list[JobTiming] = [j for j in read_jobs(client, ids) if j is not None]
    done = sorted(j.completed_ms for j in jobs)
    start_s, end_s = done[0] / 1000, done[-1] / 1000
    rate = (len(done) - 1) / (end_s - start_s) if end_s > start_s else float("nan")
    origin = time.time() - (time.monotonic() - cpu.started)  # sampler's clock -> wall clock

    def cpu_at(wall: float) -> float:
        before = [v for t, v in cpu.samples if origin + t <= wall]
        return before[-1] if before else cpu.samples[0][1]

    used = cpu_at(end_s + 0.1) - cpu_at(start_s)
    per_1000 = 1000 * used / len(done) if done else float("nan")
    cpu_busy = used / max(1e-9, end_s - start_s)
    median_batch = pct([j.batch_size for j in jobs], 50)
    inner, ours = hot_spots(opts.out / "raw" / "manager-profile.txt")
    spot_lines = "\n".join(f"| {frame} | {share:.1%} |" for frame, share in inner)
    our_lines = "\n".join(f"| {frame} | {share:.1%} |" for frame, share in ours)
    markdown = f"""{n:,} jobs pre-loaded into Redis with `JobStore.submit`, then one manager started with
one worker running an instant model (T(b) = 0, max batch 128) and {MANAGER_INFLIGHT} batches in flight.
Rate from the first to the last job completed (manager timestamps); CPU from /proc for the manager
process over the same span.

| jobs | completed | jobs/s | manager CPU s per 1,000 jobs | manager CPU busy | median batch |
| --- | --- | --- | --- | --- | --- |
| {n:,} | {len(done):,} | {rate:,.0f} | {per_1000:.3f} | {cpu_busy:.0%} | {median_batch:.0f} |

Where the manager's time goes (py-spy at 200 Hz over the run; share of samples). Inclusive, by the
manager's own functions:

| function | share |
| --- | --- |
{our_lines or "| py-spy did not run | |"}

Innermost frames (where the CPU actually is):

| frame | share |
| --- | --- |
{spot_lines or "| py-spy did not run | |"}
"""
    return Section(
        "Manager throughput (scenario 4)", markdown, key={"jobs_per_s": rate, "cpu_per_1000": per_1000}
    )
