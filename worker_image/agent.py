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
import time
import uuid
from dataclasses import replace
from pathlib import Path
from types import TracebackType

import aiohttp

from manager.jobs import now_ms
from manager.redis_client import async_client
from manager.settings import Settings
from manager.workers import WorkerInfo, WorkerRegistry, WorkerState
from worker_image import triton_server
from worker_image.checkpoint import build_tiny_gpt2
from worker_image.metrics_push import MetricsPusher

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 15.0
CHECKPOINT_DIR = "checkpoint"


class ModelLoadError(RuntimeError):
    """Triton could not load a model the worker is meant to serve."""


class TritonExitedError(RuntimeError):
    """Triton stopped on its own; the worker cannot serve."""


def prepare_model_repository(source: Path, state_dir: Path, worker_id: str) -> Path:
    """This worker's model repository: the project's models, each with a checkpoint where one is needed."""
    dest = state_dir / "workers" / worker_id / "models"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__"))
    gpt2 = dest / "tiny-gpt2"
    if gpt2.is_dir() and not (gpt2 / CHECKPOINT_DIR).exists():
        (gpt2 / CHECKPOINT_DIR).symlink_to(build_tiny_gpt2(state_dir / "checkpoints" / "tiny-gpt2").resolve())
    return dest


def repository_models(repository: Path) -> list[str]:
    return sorted(p.name for p in repository.iterdir() if (p / "config.pbtxt").exists())


class WorkerAgent:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.worker_id = settings.worker_id or f"worker-{uuid.uuid4().hex[:8]}"
        self._redis = async_client(settings)
        self._registry = WorkerRegistry(self._redis, settings.heartbeat_s)
        self._process: asyncio.subprocess.Process | None = None
        self._http: aiohttp.ClientSession | None = None
        self._began = time.monotonic()
        # The agent reads its own Triton's metrics over loopback, wherever Triton is advertised.
        triton_metrics = f"http://127.0.0.1:{settings.triton_metrics_port}/metrics"
        self._pusher = MetricsPusher(
            settings.pushgateway_url, self.worker_id, triton_metrics, settings.heartbeat_s
        )
        self._heartbeat: asyncio.Task[None] | None = None
        host = settings.worker_advertise_host
        self.info = WorkerInfo(
            id=self.worker_id,
            grpc_url=f"{host}:{settings.triton_grpc_port}",
            http_url=f"http://{host}:{settings.triton_http_port}",
            metrics_url=f"http://{host}:{settings.triton_metrics_port}/metrics",
            models=frozenset(),
            state=WorkerState.STARTING,
            started_ms=now_ms(),
        )

    async def start(self) -> None:
        cfg = self.settings
        repository = prepare_model_repository(cfg.model_repository, cfg.state_dir, self.worker_id)
        models = list(cfg.worker_models or repository_models(repository))
        install = triton_server.locate(cfg.state_dir)
        args = triton_server.command(
            install,
            model_repository=repository,
            models=models,
            host="0.0.0.0" if cfg.worker_provider == "ecs" else "127.0.0.1",
            http_port=cfg.triton_http_port,
            grpc_port=cfg.triton_grpc_port,
            metrics_port=cfg.triton_metrics_port,
            preload=False,  # the agent loads each model itself, to time it
        )
        log.info("worker %s: starting Triton with %s", self.worker_id, ", ".join(models))
        self._process = await asyncio.create_subprocess_exec(*args, env={**os.environ, **install.env})
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        self.info = await self._registry.publish(self.info)
        await self._wait_ready()
        await asyncio.gather(*(self._load_model(model) for model in models))
        self.info = await self._registry.publish(
            replace(self.info, state=WorkerState.READY, models=frozenset(await self._loaded_models()))
        )
        self._pusher.cold_start_seconds = time.monotonic() - self._began
        log.info(
            "worker %s READY at %s serving %s", self.worker_id, self.info.grpc_url, sorted(self.info.models)
        )
        self._heartbeat = asyncio.create_task(self._heartbeat_loop(), name="heartbeat")
        await self._pusher.start()

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

    async def _load_model(self, model: str) -> None:
        """Loads one model through Triton's repository API and records how long it took."""
        assert self._http is not None
        began = time.monotonic()
        url = f"{self.info.http_url}/v2/repository/models/{model}/load"
        async with self._http.post(
            url, json={}, timeout=aiohttp.ClientTimeout(total=READY_TIMEOUT_S)
        ) as response:
            if response.status != 200:
                raise ModelLoadError(f"Triton could not load {model}: {await response.text()}")
        seconds = self._pusher.model_load_seconds[model] = time.monotonic() - began
        log.info("worker %s: loaded %s in %.1f s", self.worker_id, model, seconds)

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
            except OSError as exc:
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
        with contextlib.suppress(OSError, aiohttp.ClientError):
            self.info = await self._registry.publish(replace(self.info, state=WorkerState.DRAINING))
            await asyncio.sleep(min(1.0, self.settings.heartbeat_s))
            await self._registry.remove(self.worker_id)
        await self._pusher.aclose()
        if self._http is not None:
            await self._http.close()  # Triton waits out open HTTP connections, ours included, on exit
        if self._process is not None and self._process.returncode is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._process.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
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
