"""A platform for fault tests: its own Redis (restartable), gpu-sim workers, managers started on demand."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import redis
from prometheus_client.parser import text_string_to_metric_families

from contract.keys import job_key, worker_key
from local_stack.stack import redis_argv
from tests.integration.conftest import base_env
from tests.models import fault_injection_repository
from tests.processes import free_port, kill9, port_open, start, stop, synapse, wait_until

FINAL = {"COMPLETED", "FAILED"}


def slow_gpu_sim(dest: Path, base_ms: int, per_item_ms: float) -> Path:
    """A model repository whose gpu-sim takes base_ms + per_item_ms * b, so batches stay in flight; its
    fault markers (`!fail`, `!crash`) are on."""
    fault_injection_repository(dest, ("gpu-sim",))
    config = dest / "gpu-sim" / "config.pbtxt"
    text = re.sub(r'(key: "base_ms" value: \{ string_value: )"[^"]*"', rf'\1"{base_ms}"', config.read_text())
    text = re.sub(r'(key: "per_item_ms" value: \{ string_value: )"[^"]*"', rf'\1"{per_item_ms}"', text)
    config.write_text(text)
    return dest


def fault_env(root: Path, redis_port: int, **extra: str) -> dict[str, str]:
    """A fault stack's environment: gpu-sim slowed so that batches stay in flight, short timeouts and
    heartbeats so a fault shows within seconds; `extra` settings on top."""
    env = base_env(f"redis://127.0.0.1:{redis_port}/0", root / "state")
    env.update(
        SYNAPSE_MODEL_REPOSITORY=str(slow_gpu_sim(root / "models", base_ms=60, per_item_ms=1)),
        SYNAPSE_MODELS="gpu-sim",
        SYNAPSE_TRITON_TIMEOUT_S="3",
        SYNAPSE_RECLAIM_IDLE_S="4",
        SYNAPSE_HEARTBEAT_S="1",
        **extra,
    )
    return env


@dataclass
class FaultStack:
    root: Path
    redis_port: int
    env: dict[str, str]
    api: str = ""
    api_key: str = "sk-faults"
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    metrics_ports: dict[str, int] = field(default_factory=dict)  # each manager's /metrics

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url, decode_responses=True)

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def start_redis(self) -> None:
        proc = start(redis_argv(self.redis_port, self.root / "redis"), {}, self.log("redis"))
        wait_until(lambda: port_open(self.redis_port), 30, "redis", proc, self.log("redis"))
        self.procs["redis"] = proc

    def stop_redis(self) -> None:
        stop(self.procs.pop("redis"))

    def start_worker(self, name: str, models: str = "gpu-sim") -> None:
        env = {
            **self.env,
            "SYNAPSE_WORKER_ID": name,
            "SYNAPSE_WORKER_MODELS": models,
            "SYNAPSE_TRITON_HTTP_PORT": str(free_port()),
            "SYNAPSE_TRITON_GRPC_PORT": str(free_port()),
            "SYNAPSE_TRITON_METRICS_PORT": str(free_port()),
        }
        proc = start(synapse("worker"), env, self.log(name))
        self.procs[name] = proc

    def wait_workers_ready(self, *names: str) -> None:
        client = self.redis()
        for name in names:
            wait_until(
                lambda n=name: client.hget(worker_key(n), "state") == "READY",  # type: ignore[misc]
                300, f"worker {name}", self.procs[name], self.log(name),
            )  # fmt: skip

    def start_manager(self, name: str) -> None:
        port = free_port()
        proc = start(synapse("manager"), {**self.env, "SYNAPSE_METRICS_PORT": str(port)}, self.log(name))
        wait_until(lambda: port_open(port), 60, name, proc, self.log(name))
        self.procs[name] = proc
        self.metrics_ports[name] = port

    def manager_metrics(self, name: str) -> dict[str, float]:
        """A running manager's /metrics samples, each name with its labels as Prometheus prints them."""
        url = f"http://127.0.0.1:{self.metrics_ports[name]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as page:
            text = page.read().decode()
        found: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                found[f"{sample.name}{{{labels}}}"] = sample.value
        return found

    def start_gateway(self, max_queue_length: int) -> None:
        port = free_port()
        env = {**self.env, "SYNAPSE_API_PORT": str(port), "SYNAPSE_API_KEY": self.api_key,
               "SYNAPSE_MAX_QUEUE_LENGTH": str(max_queue_length)}  # fmt: skip
        proc = start(synapse("gateway"), env, self.log("gateway"))
        wait_until(lambda: port_open(port), 60, "gateway", proc, self.log("gateway"))
        self.procs["gateway"] = proc
        self.api = f"http://127.0.0.1:{port}"

    def stop(self, name: str) -> int:
        return stop(self.procs.pop(name))

    def kill9(self, name: str) -> None:
        kill9(self.procs.pop(name))

    def stop_all(self) -> None:
        """Newest first, Redis last: managers and workers drain while the store still answers."""
        for name in reversed([n for n in self.procs if n != "redis"]):
            self.stop(name)
        if "redis" in self.procs:
            self.stop("redis")

    def jobs(self, ids: list[str]) -> list[dict[str, str]]:
        """The job hashes; while Redis restarts (refusing, or loading its AOF) it asks again."""
        deadline = time.monotonic() + 60
        while True:
            try:
                pipe = self.redis().pipeline(transaction=False)
                for job_id in ids:
                    pipe.hgetall(job_key(job_id))
                return list(pipe.execute())
            except redis.ConnectionError:  # BusyLoadingError is one too
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def wait_final(self, ids: list[str], timeout_s: float) -> list[dict[str, str]]:
        """The jobs once every one is final; raises at the deadline, naming the jobs that are not."""
        deadline = time.monotonic() + timeout_s
        while True:
            jobs = self.jobs(ids)
            waiting = {
                i: j.get("status") or "gone"
                for i, j in zip(ids, jobs, strict=True)
                if j.get("status") not in FINAL
            }
            if not waiting:
                return jobs
            if time.monotonic() > deadline:
                shown = ", ".join(f"{i} {s}" for i, s in list(waiting.items())[:5])
                raise TimeoutError(
                    f"{len(waiting)} of {len(ids)} jobs not final after {timeout_s:.0f} s: {shown}"
                )
            time.sleep(0.25)

    def wait_any_completed(self, ids: list[str], timeout_s: float = 60) -> None:
        wait_until(lambda: any(j.get("status") == "COMPLETED" for j in self.jobs(ids)), timeout_s,
                   "a first completed job")  # fmt: skip


async def submit_many(api: str, key: str, bodies: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """Posts every body at once, as that many clients honouring Retry-After would: one the gateway sheds
    (503 `overloaded`: nothing was done) is sent again after its Retry-After. Returns (status, payload)
    in order."""
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), headers={"x-api-key": key},
        timeout=aiohttp.ClientTimeout(total=120),
    ) as session:  # fmt: skip

        async def one(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            while True:
                async with session.post(f"{api}/async-infer", json=body) as response:
                    payload = dict(await response.json())
                    retry_after = response.headers.get("Retry-After")
                if response.status == 503 and payload.get("error", {}).get("code") == "overloaded":
                    await asyncio.sleep(float(retry_after or 1))
                    continue
                if response.status in (429, 503):
                    payload["retry_after"] = retry_after
                return response.status, payload

        return list(await asyncio.gather(*(one(b) for b in bodies)))


def accepted_ids(replies: list[tuple[int, dict[str, Any]]]) -> list[str]:
    return [str(payload["jobId"]) for status, payload in replies if status == 202]


def tally(jobs: list[dict[str, str]], accepted: int) -> dict[str, int]:
    """accepted / completed / failed / lost, as the closing note reports them."""
    completed = sum(j.get("status") == "COMPLETED" for j in jobs)
    failed = sum(j.get("status") == "FAILED" for j in jobs)
    return {
        "accepted": accepted,
        "completed": completed,
        "failed": failed,
        "lost": accepted - completed - failed,
    }
