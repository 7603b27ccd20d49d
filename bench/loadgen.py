"""The load generator: open-loop Poisson arrivals at a target rate, or closed-loop fixed concurrency,
against one of three targets: the HTTP gateway, the front door's submit function in-process, or a
Triton server called directly (the baselines).

Open loop means a request is sent at its scheduled time whether or not earlier ones have returned,
and its latency counts from that scheduled time, so a stalled system cannot hide its queue
(no coordinated omission).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from tqdm import tqdm

from contract.job_record import is_final
from contract.job_store import JobStore
from contract.jobs import Job, JobStatus
from contract.redis_client import sync_client
from contract.settings import Settings
from manager.triton import TritonClient
from planner.simulator import poisson_arrivals

WAIT_S = 20.0  # one long-poll, as a client would hold it
DRAIN_TIMEOUT_S = 30.0
GAVE_UP = "gave_up"  # still out when the run's drain timed out
CONNECTIONS = 1000


@dataclass(slots=True)
class Sample:
    """One request as the client saw it; times in seconds on the client's monotonic clock."""

    intended: float
    sent: float = 0.0
    done: float = 0.0
    ok: bool = False
    job_id: str = ""
    error: str = ""

    @property
    def latency_s(self) -> float:
        return self.done - self.intended


class Target(Protocol):
    name: str

    async def call(self, index: int, sample: Sample) -> None:
        """Sends request `index` and fills in the sample (job_id, ok, error)."""

    async def aclose(self) -> None: ...


def prompt(index: int) -> str:
    return f"bench prompt {index}"


class HttpTarget:
    """POST /async-infer, then GET /results/{id}?wait=20 until the job is final: a real client, which
    honours Retry-After (a refused submission ends the sample, answered but not served; a refused
    long-poll is asked again after Retry-After, never at once).

    At most CONNECTIONS requests are open at once (the gateway runs SYNAPSE_GATEWAY_CONCURRENCY
    submissions at a time, and more long-polls); a request past that waits in the client, and its
    latency, counted from its scheduled time, shows it.
    """

    name = "http"

    def __init__(self, api: str, api_key: str, model: str = "gpu-sim") -> None:
        self._api = api
        self._model = model
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=CONNECTIONS),
            headers={"x-api-key": api_key},
            timeout=aiohttp.ClientTimeout(total=WAIT_S + 30),
        )

    async def call(self, index: int, sample: Sample) -> None:
        body = {"model": self._model, "prompt": prompt(index)}
        async with self._session.post(f"{self._api}/async-infer", json=body) as response:
            payload = await response.json()
            if response.status != 202:
                sample.error = f"{response.status} {payload.get('error', {}).get('code', '')}"
                return
        sample.job_id = str(payload["jobId"])
        while True:
            url = f"{self._api}/results/{sample.job_id}?wait={WAIT_S:g}"
            async with self._session.get(url) as response:
                view = await response.json()
                retry_after = float(response.headers.get("Retry-After") or 1)
            if response.status in (429, 503):  # a share of the waits taken, or the gateway busy
                await asyncio.sleep(retry_after)
                continue
            if is_final(view):
                sample.ok = view["status"] == JobStatus.COMPLETED
                sample.error = "" if sample.ok else str(view.get("error", {}).get("code", ""))
                return

    async def aclose(self) -> None:
        await self._session.close()


class DirectTarget:
    """The front door's own submit function in-process (`JobStore.submit`): the path behind the
    gateway without HTTP. It does not wait for results: the outcome is read from the job's hash after
    the run, and latency runs from the request's scheduled time to the manager's completion time, so
    the client adds no thread hops or polls of its own to the figure (and to the CPU it shares)."""

    name = "direct"

    def __init__(self, settings: Settings, model: str = "gpu-sim") -> None:
        self._store = JobStore(sync_client(settings), settings.job_ttl_s, settings.max_queue_length)
        self._model = model

    async def call(self, index: int, sample: Sample) -> None:
        job = Job.new(model=self._model, prompt=prompt(index), max_tokens=16, timeout_ms=60_000)
        # One short round trip, made inline: a thread hop per job would cost more than the call.
        if self._store.submit(job):
            sample.job_id, sample.ok = job.id, True
        else:
            sample.error = "queue_full"

    async def aclose(self) -> None:
        """The store's connections close with the process."""


class TritonTarget:
    """One gRPC request of batch 1 per job, straight to a Triton server: the baselines' client."""

    def __init__(self, name: str, url: str, model: str = "gpu-sim") -> None:
        self.name = name
        self._client = TritonClient(url, timeout_s=60)
        self._model = model

    async def call(self, index: int, sample: Sample) -> None:
        try:
            rows = await self._client.infer(self._model, [prompt(index)], [16])
        except Exception as exc:  # a failed request is a figure of the run, not a crash of the benchmark
            sample.error = type(exc).__name__
            return
        sample.ok = not rows[0].error

    async def aclose(self) -> None:
        await self._client.close()


@dataclass
class Run:
    target: str
    samples: list[Sample]
    started_wall: float  # time.time() when the first request was due
    duration_s: float
    offered_rate: float = 0.0
    concurrency: int = 0


async def _timed(target: Target, index: int, sample: Sample, clock: Callable[[], float]) -> None:
    sample.sent = clock()
    try:
        await target.call(index, sample)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        sample.error = sample.error or type(exc).__name__
    except asyncio.CancelledError:
        sample.error = GAVE_UP
        raise
    sample.done = clock()


async def open_loop(
    target: Target, rate: float, duration_s: float, *, seed: int = 1, progress: bool = True
) -> Run:
    """Poisson arrivals at `rate` for `duration_s`; waits for the stragglers up to DRAIN_TIMEOUT_S."""
    arrivals = poisson_arrivals(rate, duration_s, seed).tolist()
    samples = [Sample(intended=t) for t in arrivals]
    bar = tqdm(total=len(samples), desc=f"{target.name} {rate:,.0f}/s", unit="job", disable=not progress,
               leave=False)  # fmt: skip
    start, wall = time.monotonic(), time.time()

    def clock() -> float:
        return time.monotonic() - start

    tasks: list[asyncio.Task[None]] = []
    for index, sample in enumerate(samples):
        delay = sample.intended - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(_timed(target, index, sample, clock))
        task.add_done_callback(lambda _: bar.update())
        tasks.append(task)
    await _drain(tasks)
    bar.close()
    return Run(target.name, samples, wall, duration_s, offered_rate=rate)


async def closed_loop(target: Target, concurrency: int, duration_s: float, *, progress: bool = True) -> Run:
    """`concurrency` clients, each sending its next request as soon as the last one returns."""
    samples: list[Sample] = []
    bar = tqdm(desc=f"{target.name} x{concurrency}", unit="job", disable=not progress, leave=False)
    start, wall = time.monotonic(), time.time()

    def clock() -> float:
        return time.monotonic() - start

    async def client() -> None:
        while clock() < duration_s:
            sample = Sample(intended=clock())
            samples.append(sample)
            await _timed(target, len(samples), sample, clock)
            bar.update()

    await _drain([asyncio.create_task(client()) for _ in range(concurrency)])
    bar.close()
    return Run(target.name, samples, wall, duration_s, concurrency=concurrency)


async def _drain(tasks: list[asyncio.Task[None]]) -> None:
    """Waits for outstanding requests; those still out after the timeout count as lost."""
    _, pending = await asyncio.wait(tasks, timeout=DRAIN_TIMEOUT_S) if tasks else (set(), set())
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
