"""The worker agent: starts Triton, registers the worker in Redis, heartbeats, and drains on SIGTERM.

The same agent runs in the GPU container on ECS and as a process of the local stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import uuid
from dataclasses import replace
from pathlib import Path
from types import TracebackType

import aiohttp
from redis.exceptions import RedisError

from manager.jobs import now_ms
from manager.redis_client import async_client
from manager.settings import Settings
from manager.workers import WorkerInfo, WorkerRegistry, WorkerState
from worker_image import triton_server
from worker_image.checkpoint import build_tiny_gpt2

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 300.0
ECS_METADATA = "ecs-metadata"
STOP_TIMEOUT_S = 15.0
CHECKPOINT_DIR = "checkpoint"


class TritonExitedError(RuntimeError):
    """Triton stopped on its own; the worker cannot serve."""


def prepare_model_repository(source: Path, state_dir: Path, worker_id: str, models: list[str]) -> Path:
    """This worker's model repository: the models it loads, each with a checkpoint where one is needed."""
    dest = state_dir / "workers" / worker_id / "models"
    shutil.rmtree(dest, ignore_errors=True)
    for model in models:
        shutil.copytree(source / model, dest / model, ignore=shutil.ignore_patterns("__pycache__"))
    gpt2 = dest / "tiny-gpt2"
    if gpt2.is_dir() and not (gpt2 / CHECKPOINT_DIR).exists():
        (gpt2 / CHECKPOINT_DIR).symlink_to(build_tiny_gpt2(state_dir / "checkpoints" / "tiny-gpt2").resolve())
    return dest


def repository_models(repository: Path) -> list[str]:
    return sorted(p.name for p in repository.iterdir() if (p / "config.pbtxt").exists())


async def ecs_task_ip(http: aiohttp.ClientSession) -> str:
    """The task's own address in its VPC (awsvpc networking), from the ECS task metadata endpoint."""
    base = os.environ.get("ECS_CONTAINER_METADATA_URI_V4")
    if not base:
        raise RuntimeError(
            f"SYNAPSE_WORKER_ADVERTISE_HOST={ECS_METADATA} but ECS_CONTAINER_METADATA_URI_V4 is unset"
        )
    async with http.get(f"{base}/task") as response:
        task = await response.json(content_type=None)
    for container in task.get("Containers", []):
        for network in container.get("Networks", []):
            if network.get("IPv4Addresses"):
                return str(network["IPv4Addresses"][0])
    raise RuntimeError("the ECS task metadata lists no IPv4 address")


def with_host(info: WorkerInfo, host: str, settings: Settings) -> WorkerInfo:
    return replace(
        info,
        grpc_url=f"{host}:{settings.triton_grpc_port}",
        http_url=f"http://{host}:{settings.triton_http_port}",
        metrics_url=f"http://{host}:{settings.triton_metrics_port}/metrics",
    )


class WorkerAgent:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.worker_id = settings.worker_id or f"worker-{uuid.uuid4().hex[:8]}"
        self._redis = async_client(settings)
        self._registry = WorkerRegistry(self._redis, settings.heartbeat_s)
        self._process: asyncio.subprocess.Process | None = None
        self._http: aiohttp.ClientSession | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        # The agent talks to its own Triton over loopback until an ECS address is known.
        host = (
            "127.0.0.1" if settings.worker_advertise_host == ECS_METADATA else settings.worker_advertise_host
        )
        self.info = with_host(
            WorkerInfo(id=self.worker_id, grpc_url="", http_url="", metrics_url="", models=frozenset(),
                       state=WorkerState.STARTING, started_ms=now_ms()),
            host,
            settings,
        )  # fmt: skip

    async def start(self) -> None:
        cfg = self.settings
        models = list(cfg.worker_models or repository_models(cfg.model_repository))
        repository = prepare_model_repository(cfg.model_repository, cfg.state_dir, self.worker_id, models)
        install = triton_server.locate(cfg.state_dir)
        args = triton_server.command(
            install,
            model_repository=repository,
            models=models,
            host=cfg.triton_bind_host,
            http_port=cfg.triton_http_port,
            grpc_port=cfg.triton_grpc_port,
            metrics_port=cfg.triton_metrics_port,
        )
        log.info("worker %s: starting Triton with %s", self.worker_id, ", ".join(models))
        self._process = await asyncio.create_subprocess_exec(*args, env={**os.environ, **install.env})
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        if cfg.worker_advertise_host == ECS_METADATA:
            self.info = with_host(self.info, await ecs_task_ip(self._http), cfg)
        self.info = await self._registry.publish(self.info)
        await self._wait_ready()
        self.info = await self._registry.publish(
            replace(self.info, state=WorkerState.READY, models=frozenset(await self._loaded_models()))
        )
        log.info(
            "worker %s READY at %s serving %s", self.worker_id, self.info.grpc_url, sorted(self.info.models)
        )
        self._heartbeat = asyncio.create_task(self._heartbeat_loop(), name="heartbeat")

    async def _wait_ready(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_TIMEOUT_S
        while loop.time() < deadline:
            if self._process is not None and self._process.returncode is not None:
                raise TritonExitedError(
                    f"Triton exited with code {self._process.returncode} before it was ready"
                )
            if await self._triton_ready():
                return
            await asyncio.sleep(0.2)
        raise TimeoutError(f"Triton was not ready after {READY_TIMEOUT_S:.0f} s")

    async def _triton_ready(self) -> bool:
        assert self._http is not None
        try:
            async with self._http.get(f"{self.info.http_url}/v2/health/ready") as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def _loaded_models(self) -> list[str]:
        assert self._http is not None
        async with self._http.post(
            f"{self.info.http_url}/v2/repository/index", json={"ready": True}
        ) as response:
            index = await response.json()
        return [entry["name"] for entry in index if entry.get("state") == "READY"]

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_s)
            if self._process is not None and self._process.returncode is not None:
                log.error("worker %s: Triton exited with code %s", self.worker_id, self._process.returncode)
                await self._registry.remove(self.worker_id)
                raise TritonExitedError("Triton exited")
            healthy = await self._triton_ready()
            state = WorkerState.READY if healthy else WorkerState.DEGRADED
            try:
                self.info = await self._registry.publish(replace(self.info, state=state))
            except (RedisError, OSError) as exc:  # Redis restarting: keep serving, beat again next time
                log.warning("worker %s: heartbeat failed: %s", self.worker_id, exc)

    async def wait_closed(self) -> None:
        """Returns when the heartbeat stops (Triton died), so the process can exit and be restarted."""
        if self._heartbeat is not None:
            with contextlib.suppress(TritonExitedError, asyncio.CancelledError):
                await self._heartbeat

    async def aclose(self) -> None:
        """Drain: tell the managers to stop sending, let in-flight batches finish, then stop Triton."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError, TritonExitedError):
                await self._heartbeat
        with contextlib.suppress(RedisError, OSError, aiohttp.ClientError):
            self.info = await self._registry.publish(replace(self.info, state=WorkerState.DRAINING))
            await asyncio.sleep(min(1.0, self.settings.heartbeat_s))
            await self._registry.remove(self.worker_id)
        if self._process is not None and self._process.returncode is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._process.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
        if self._http is not None:
            await self._http.close()
        await self._redis.aclose()
        log.info("worker %s stopped", self.worker_id)

    async def __aenter__(self) -> WorkerAgent:
        try:
            await self.start()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


async def run_worker(settings: Settings) -> None:
    """Runs until SIGTERM/SIGINT (drains) or until Triton dies (exits non-zero for the supervisor)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with WorkerAgent(settings) as agent:
        closed = asyncio.create_task(agent.wait_closed())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({closed, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if closed.done():
            raise TritonExitedError("Triton exited")
