"""The worker agent: starts Triton, registers the worker in Redis, heartbeats, and drains on SIGTERM.

The same agent runs in the GPU container on ECS and as a process of the local stack. A Triton that
exits, or stops answering its readiness check for `triton_unready_exit_s`, ends the agent (non-zero,
Triton killed): whoever started the worker, the local provider or ECS, then starts another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import signal
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from contract.catalog_build import CHECKPOINT_DIR, checkpoints_of
from contract.jobs import Priority, now_ms
from contract.keys import stream_key
from contract.processes import kill, terminate
from contract.redis_client import STORE_ERRORS, async_client, until_ready
from contract.settings import Settings
from contract.time_limit import stop, within
from contract.workers import (
    SERVING_MARKER,
    WorkerInfo,
    WorkerRegistry,
    WorkerState,
    readiness_timeout_s,
    startup_models,
    worker_folder,
)
from worker_image import triton_server
from worker_image.checkpoint import PROJECT_CHECKPOINTS
from worker_image.device import Device, DeviceUnavailableError, select_device
from worker_image.loader import ModelLoader, TritonRepository
from worker_image.metrics_push import PUSH_TIMEOUT_S, MetricsPusher
from worker_image.model_store import ModelStore, Prepare, store_from_settings

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 300.0
ECS_METADATA = "ecs-metadata"
# Triton's own exit bound and a margin to exit after it; past it, Triton is killed.
TRITON_STOP_TIMEOUT_S = triton_server.EXIT_TIMEOUT_S + 5.0
MIN_FAILED_CHECKS = 3  # readiness checks in a row that must fail before Triton counts as hung
# Readiness checks in a row that must fail before the worker stops taking batches (DEGRADED): one slow
# answer (Triton busy loading a model on a busy host) is no reason to stop sending it work; two are.
DEGRADED_AFTER_FAILED_CHECKS = 2
CLOSE_REDIS_TIMEOUT_S = 3.0  # each Redis call of the shutdown: Redis being away never keeps the agent up
DRAIN_PAUSE_S = 1.0  # at most, between marking itself DRAINING and deregistering
# The longest a clean shutdown takes: two Redis calls, the pause, the Pushgateway's delete, Triton.
# Whoever stops the agent (the ECS container's stop timeout, the local provider) waits longer.
SHUTDOWN_BOUND_S = 2 * CLOSE_REDIS_TIMEOUT_S + DRAIN_PAUSE_S + PUSH_TIMEOUT_S + TRITON_STOP_TIMEOUT_S
# Touched every heartbeat, in <state_dir>/workers/<id>/: the container health check reads its age.
ALIVE_FILE = "alive"
EXIT_DEVICE_UNAVAILABLE = 3  # SYNAPSE_DEVICE=gpu without a usable GPU: the task's exit code says so

# A heartbeat or load request gives up on these and tries again next time: Redis away, or slow.
_REDIS_AWAY: tuple[type[Exception], ...] = (*STORE_ERRORS, TimeoutError)


class TritonExitedError(RuntimeError):
    """Triton stopped on its own; the worker cannot serve."""


class TritonHungError(TritonExitedError):
    """Triton is alive but has not been ready for too long (hung, or stopped): the worker cannot serve."""


@dataclass
class ReadinessWatch:
    """Hung = `min_checks` failed readiness checks in a row and not ready for `limit_s`: a busy Triton's
    one slow answer never ends its worker, and a hung one is given up in bounded time."""

    limit_s: float
    last_ready: float
    min_checks: int = MIN_FAILED_CHECKS
    failures: int = 0

    def observe(self, ready: bool, now: float) -> bool:
        """Records one check; True once Triton counts as hung."""
        if ready:
            self.last_ready, self.failures = now, 0
            return False
        self.failures += 1
        return self.failures >= self.min_checks and now - self.last_ready >= self.limit_s

    @property
    def degraded(self) -> bool:
        """Whether enough checks in a row failed that the worker should take no batches."""
        return self.failures >= DEGRADED_AFTER_FAILED_CHECKS


def project_checkpoint(checkpoints: Path) -> Prepare:
    """A model fetched without a checkpoint folder gets the one the project provides for it (tiny-gpt2's
    seeded one, SmolLM2's converted one, minilm's packaged weights), made once in `checkpoints`."""

    def prepare(model: str, folder: Path) -> None:
        build = PROJECT_CHECKPOINTS.get(model)
        if build is not None and not (folder / CHECKPOINT_DIR).exists():
            built = build(checkpoints / model)
            (folder / CHECKPOINT_DIR).symlink_to(built.resolve())

    return prepare


def worker_repository(state_dir: Path, worker_id: str) -> Path:
    """This worker's Triton repository: a symlink per staged model into the (shared) disk cache."""
    dest = worker_folder(state_dir, worker_id) / "models"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    return dest


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
        self._ready_timeout_s = readiness_timeout_s(settings.heartbeat_s)
        self._watch: ReadinessWatch | None = None  # set once serving: readiness counts from then on
        self.fault: TritonExitedError | None = None  # why the heartbeat stopped, if it did
        folder = worker_folder(settings.state_dir, self.worker_id)
        self._alive_file = folder / ALIVE_FILE
        self._serving_marker = folder / SERVING_MARKER
        self._began = time.monotonic()
        # The agent reads its own Triton's metrics over loopback, wherever Triton is advertised.
        triton_metrics = f"http://127.0.0.1:{settings.triton_metrics_port}/metrics"
        self._pusher = MetricsPusher(
            settings.pushgateway_url, self.worker_id, triton_metrics, settings.heartbeat_s
        )
        self._loads: asyncio.Task[None] | None = None
        self._store: ModelStore | None = None
        self._publishing = asyncio.Lock()
        # A warm standby serves only once promoted; a promotion may arrive before it finished starting.
        self._serving_state = WorkerState.STANDBY if settings.worker_standby else WorkerState.READY
        self.device = Device.CPU  # `select_device` decides, before start()
        # On ECS the task's address is known only once start() asks the metadata endpoint.
        host = (
            "127.0.0.1" if settings.worker_advertise_host == ECS_METADATA else settings.worker_advertise_host
        )
        self.info = with_host(
            WorkerInfo(id=self.worker_id, grpc_url="", http_url="", metrics_url="", models=frozenset(),
                       state=WorkerState.STARTING, started_ms=now_ms()),
            host,
            settings,
        )  # fmt: skip

    async def select_device(self) -> None:
        """The GPU or the CPU per SYNAPSE_DEVICE. A GPU worker that cannot use CUDA registers FAILED, with
        the reason, and raises: it never serves, and its registration expires after its last heartbeat."""
        try:
            self.device = await asyncio.to_thread(select_device, self.settings.device)
        except DeviceUnavailableError as exc:
            log.error("worker %s: refusing to serve: %s", self.worker_id, exc)
            failed = replace(self.info, state=WorkerState.FAILED, reason=str(exc))
            await self._bounded("register as FAILED", self._registry.publish(failed))
            await self._redis.aclose()
            raise
        log.info("worker %s runs its models on the %s", self.worker_id, self.device.upper())

    async def start(self) -> None:
        cfg = self.settings
        triton_server.clean_up_after_dead_tritons()  # of agents killed on this machine before us
        await until_ready(self._redis, f"worker {self.worker_id}", log)
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        if cfg.worker_advertise_host == ECS_METADATA:
            self.info = with_host(self.info, await ecs_task_ip(self._http), cfg)
        self._store = store_from_settings(cfg, project_checkpoint(checkpoints_of(cfg)))
        repository = worker_repository(cfg.state_dir, self.worker_id)
        secret = secrets.token_hex(24)  # per start: only this agent may load and unload models
        triton = TritonRepository(self._http, self.info.http_url, secret)
        budget = cfg.worker_model_budget
        self._loader = ModelLoader(
            self._store, triton, repository, budget, self._publish_models, device=self.device
        )
        self._loader.load_seconds = self._pusher.model_load_seconds  # on-demand loads are pushed too
        models = await asyncio.to_thread(startup_models, cfg, self._store.source.models)
        for model in models:
            await asyncio.to_thread(self._loader.stage, model)
        install = triton_server.locate(cfg.state_dir)
        args = triton_server.command(
            install,
            model_repository=repository,
            models=[],
            host=cfg.triton_bind_host,
            http_port=cfg.triton_http_port,
            grpc_port=cfg.triton_grpc_port,
            metrics_port=cfg.triton_metrics_port,
            repository_secret=secret,
        )
        log.info("worker %s: starting Triton with no models, then loading %s through its API", self.worker_id,
                 ", ".join(models) or "none")  # fmt: skip
        # `args` runs Triton through an exec wrapper (parent-death signal, own process group): no
        # preexec_fn, whose plain fork() is unsafe while gRPC threads run.
        self._process = await asyncio.create_subprocess_exec(*args, env={**os.environ, **install.env})
        self.info = await self._registry.publish(self.info)
        # From the first registration on: a STARTING worker loading models for minutes stays registered.
        self._heartbeat = asyncio.create_task(self._heartbeat_loop(), name="heartbeat")
        await self._wait_ready()
        triton_server.hide_argument(self._process.pid, secret)  # read by now: out of Triton's cmdline
        # Each model serves as soon as it is loaded, the one with the most jobs waiting first: the worker
        # is READY with that one and loads the others while it serves (Triton would load every model
        # given at launch before it opened a port, and a burst's first answer waited for the slowest).
        ordered = await self._most_awaited_first(models)
        for model in ordered[:1]:
            await self._loader.load(model)
        await self._publish(state=self._serving_state, models=await triton.ready_models())
        self._watch = ReadinessWatch(cfg.triton_unready_exit_s, time.monotonic())
        log.info(
            "worker %s READY at %s serving %s", self.worker_id, self.info.grpc_url, sorted(self.info.models)
        )
        self._pusher.cold_start_seconds = time.monotonic() - self._began
        self._serving_marker.touch()
        serving = self._loader.serve(self._redis, self.worker_id, first=ordered[1:])
        self._loads = asyncio.create_task(serving, name="loads")
        await self._pusher.start()

    async def _most_awaited_first(self, models: list[str]) -> list[str]:
        """The models by the jobs waiting for them, most first (as configured where equal, or where
        Redis does not answer: the order is a speed-up, not a rule)."""
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for model in models:
                    pipe.xlen(stream_key(model, Priority.INTERACTIVE))
                    pipe.xlen(stream_key(model, Priority.BATCH))
                lengths = await within(CLOSE_REDIS_TIMEOUT_S, pipe.execute())
        except _REDIS_AWAY as exc:
            log.warning("worker %s: could not read the queues, loading models as configured: %s",
                        self.worker_id, exc)  # fmt: skip
            return models
        waiting = {m: int(lengths[2 * i]) + int(lengths[2 * i + 1]) for i, m in enumerate(models)}
        return sorted(models, key=lambda m: -waiting[m])

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
        """Bounded by half a heartbeat, so a hung Triton cannot hold up the registration's renewal."""
        assert self._http is not None
        url = f"{self.info.http_url}/v2/health/ready"
        try:
            async with self._http.get(
                url, timeout=aiohttp.ClientTimeout(total=self._ready_timeout_s)
            ) as reply:
                return reply.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def _publish(self, **changes: Any) -> None:
        """One writer at a time, so a heartbeat never re-publishes a model set that just changed."""
        async with self._publishing:
            self.info = replace(self.info, **changes)
            self.info = await self._registry.publish(self.info)

    async def _publish_models(self, models: frozenset[str]) -> None:
        try:
            await self._publish(models=models)
        except STORE_ERRORS as exc:  # the next heartbeat carries the new set
            log.warning("worker %s: publishing models failed: %s", self.worker_id, exc)

    async def _heartbeat_loop(self) -> None:
        """Renews the registration at a fixed rate, starting or serving; raises once Triton exited or hung.

        Fixed rate: the readiness check's time comes out of the beat's own interval, so the gap between
        renewals stays within `contract.workers.worst_renewal_gap_s`.
        """
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            due = max(due + self.settings.heartbeat_s, loop.time())
            await asyncio.sleep(due - loop.time())
            self._touch_alive()
            self._check_triton_running()
            await self._beat(await self._health())

    def _touch_alive(self) -> None:
        """The container health check reads this file's age: a wedged agent fails it like a dead one."""
        with contextlib.suppress(OSError):
            self._alive_file.touch()

    def _check_triton_running(self) -> None:
        if self._process is not None and self._process.returncode is not None:
            self._give_up(TritonExitedError(f"Triton exited with code {self._process.returncode}"))

    async def _health(self) -> dict[str, Any]:
        """What this beat publishes: nothing new while starting; READY/STANDBY once serving, DEGRADED after
        `DEGRADED_AFTER_FAILED_CHECKS` failed readiness checks in a row."""
        if self._watch is None:
            return {}
        ready = await self._triton_ready()
        if self._watch.observe(ready, time.monotonic()):
            unready_s = time.monotonic() - self._watch.last_ready
            self._give_up(TritonHungError(
                f"Triton not ready for {unready_s:.1f} s ({self._watch.failures} checks in a row)"
            ))  # fmt: skip
        return {"state": WorkerState.DEGRADED if self._watch.degraded else self._serving_state}

    def _give_up(self, fault: TritonExitedError) -> None:
        log.error("worker %s: %s; stopping so that another worker replaces this one", self.worker_id, fault)
        self.fault = fault
        raise fault

    async def _beat(self, changes: dict[str, Any]) -> None:
        try:
            await within(self.settings.heartbeat_s, self._publish(**changes))
        except _REDIS_AWAY as exc:  # Redis away: keep serving, beat again next time
            log.warning("worker %s: heartbeat failed: %r", self.worker_id, exc)

    async def promote(self) -> None:
        """A warm standby starts taking work: READY at once if started, else as soon as it is."""
        if self._serving_state is not WorkerState.STANDBY:
            return
        self._serving_state = WorkerState.READY
        log.info("worker %s promoted from STANDBY", self.worker_id)
        if self._watch is not None:  # serving: registered as STANDBY until now
            await self._publish(state=WorkerState.READY)

    async def wait_closed(self) -> None:
        """Returns when the heartbeat stops (Triton died), so the process can exit and be restarted."""
        if self._heartbeat is not None:
            with contextlib.suppress(TritonExitedError, asyncio.CancelledError):
                await self._heartbeat

    async def aclose(self) -> None:
        """Drain: tell the managers to stop sending, let in-flight batches finish, then stop Triton.

        A Triton that exited or hung has nothing to drain: it is killed before anything else (a stopped
        process never handles SIGTERM), so its batches fail over at once. Redis calls are bounded, and the
        loops are stopped even when a Redis call loses their cancel: the agent always exits.
        """
        if self.fault is not None:
            await self._kill_triton()
        await stop(self._loads)
        with contextlib.suppress(TritonExitedError):  # the fault it ended with, already recorded
            await stop(self._heartbeat)
        if self.fault is not None:  # also when the heartbeat gave up while the loops were stopping
            await self._kill_triton()
        if self.fault is None:
            draining = replace(self.info, state=WorkerState.DRAINING)
            if await self._bounded("mark itself DRAINING", self._registry.publish(draining)):
                # Managers stop sending first.
                await asyncio.sleep(min(DRAIN_PAUSE_S, self.settings.heartbeat_s))
        await self._bounded("deregister", self._registry.remove(self.worker_id))
        self._alive_file.unlink(missing_ok=True)
        self._serving_marker.unlink(missing_ok=True)
        await self._pusher.aclose()  # deletes this worker's group from the Pushgateway
        if self._http is not None:  # Triton's exit waits for open HTTP connections: ours go first
            await self._http.close()
        if self._process is not None:
            await terminate(self._process, TRITON_STOP_TIMEOUT_S, name="Triton")
        if self._store is not None:
            self._store.close()
        await self._redis.aclose()
        log.info("worker %s stopped", self.worker_id)

    async def _bounded(self, what: str, call: Awaitable[object]) -> bool:
        """Gives up on Redis after CLOSE_REDIS_TIMEOUT_S (the registration's TTL removes it instead)."""
        try:
            await within(CLOSE_REDIS_TIMEOUT_S, call)
        except _REDIS_AWAY as exc:
            log.warning("worker %s: could not %s: %r", self.worker_id, what, exc)
            return False
        return True

    async def _kill_triton(self) -> None:
        if self._process is not None and self._process.returncode is None:
            await kill(self._process)
            log.warning("worker %s: killed Triton (pid %d)", self.worker_id, self._process.pid)

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


async def started_unless_stopped(agent: WorkerAgent, stopping: asyncio.Task[bool]) -> bool:
    """Starts the agent, unless it is told to stop first: a start (Triton loading its models) can take
    a minute, and a worker whose manager died (its parent-death signal is a SIGTERM) must not go on to
    become READY beside the workers the next manager starts. False: it stopped while starting, closed."""
    starting = asyncio.create_task(agent.start())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        log.info("worker %s: stopped while starting", agent.worker_id)
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        await agent.aclose()
        return False
    try:
        starting.result()
    except BaseException:
        await agent.aclose()
        raise
    return True


async def run_worker(settings: Settings) -> None:
    """Runs until SIGTERM/SIGINT (drains) or until Triton dies (exits non-zero for the supervisor).

    SIGUSR2 promotes a warm standby (SYNAPSE_WORKER_STANDBY) to READY.
    """
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_requested.set)
    agent = WorkerAgent(settings)
    try:
        await agent.select_device()
    except DeviceUnavailableError:
        raise SystemExit(EXIT_DEVICE_UNAVAILABLE) from None  # logged; ECS replaces the task
    promotions: set[asyncio.Task[None]] = set()  # before STANDBY is ever registered: no promotion is lost
    loop.add_signal_handler(signal.SIGUSR2, lambda: promotions.add(asyncio.create_task(agent.promote())))
    stopping = asyncio.create_task(stop_requested.wait())
    if not await started_unless_stopped(agent, stopping):
        return
    try:
        closed = asyncio.create_task(agent.wait_closed())
        await asyncio.wait({closed, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if closed.done():
            raise agent.fault or TritonExitedError("Triton exited")
    finally:
        await agent.aclose()
